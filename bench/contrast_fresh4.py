"""A fifth held-out set for the semantic verifier (written 2026-12-06, frozen since).

Why: the four earlier held-out sets have each decided something and been looked at since; the
verifier trained with the written triplets (bench/data/written_train.jsonl, written at the same
time) needs data nobody has seen to be decided on. These 55 families were written for it, by
three people in parallel from one brief, before any model was run on them: in nine domains no
other family has (contrast_data.FRESH4_DOMAINS), with lexicons that repeat no value of any
other lexicon (checked). Rows: ``contrast_fresh4.jsonl`` and ``multiturn_fresh4.jsonl`` (seed
18); nothing trains or calibrates on them. Never tune on them: measure.

Lexicon and family names end with the letter of the part they come from (``_h``, ``_j``, ``_k``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== astronomy, pottery, fishing (names end with _h) =============================================

_LEXICONS_H: dict[str, Lexicon] = {
    # astronomy
    "planet_h": ("entity", [("Uranus",), ("Neptune",), ("Pluto",)], False),
    "sky_h": (
        "tier",
        [
            ("Bortle 1", "Bortle class 1"),
            ("Bortle 4", "Bortle class 4"),
            ("Bortle 8", "Bortle class 8"),
        ],
        False,
    ),
    "optic_h": (
        "entity",
        [
            ("10x50 binoculars",),
            ("a 6-inch Dobsonian", "a 6-inch Dob"),
            ("a 16-inch Dobsonian", "a 16-inch Dob"),
        ],
        False,
    ),
    "mod_phase_h": ("antonym", [("waxing",), ("waning",)], True),
    "mod_orbit_h": ("antonym", [("prograde",), ("retrograde",)], True),
    "star_h": (
        "entity",
        [("Sirius",), ("Vega",), ("Polaris", "the North Star"), ("Deneb",), ("Arcturus",)],
        False,
    ),
    "shower_time_h": (
        "time",
        [
            ("in early January", "in the first days of January"),
            ("in mid-August", "around August 12"),
            ("in late October", "around October 21"),
            ("in mid-December", "around December 14"),
        ],
        False,
    ),
    # pottery
    "cone_h": ("tier", [("cone 04",), ("cone 6",), ("cone 10",)], False),
    "technique_h": (
        "entity",
        [
            ("coil building", "coiling"),
            ("slab building", "slab construction"),
            ("wheel throwing", "throwing on the wheel"),
        ],
        False,
    ),
    "act_dry_h": ("antonym", [("hasten", "hurry along"), ("hold back", "put the brakes on")], True),
    "mod_atmos_h": ("antonym", [("oxidation",), ("reduction",)], True),
    "glaze_h": (
        "entity",
        [("shino",), ("celadon",), ("tenmoku", "temmoku"), ("wood ash glaze", "ash glaze")],
        False,
    ),
    "glaze_amt_h": (
        "quantity",
        [
            ("500 grams", "half a kilogram"),
            ("2 kilograms", "two kilos"),
            ("10 pounds", "10 lbs"),
            ("25 kilograms", "25 kg"),
        ],
        False,
    ),
    # fishing
    "fish_h": (
        "entity",
        [("walleye",), ("channel catfish",), ("crappie",), ("northern pike",)],
        False,
    ),
    "line_h": (
        "entity",
        [("braided line", "braid"), ("fluorocarbon", "fluoro"), ("monofilament", "mono")],
        False,
    ),
    "mod_tide_h": ("antonym", [("rising",), ("falling", "ebbing")], True),
    "act_drag_h": ("antonym", [("cinch down", "firm up"), ("ease off", "back off")], True),
    "spawn_h": (
        "time",
        [
            ("before the spawn", "pre-spawn"),
            ("during the spawn", "mid-spawn"),
            ("after the spawn", "post-spawn"),
        ],
        False,
    ),
    "flywt_h": (
        "tier",
        [("3-weight", "3wt"), ("6-weight", "6wt"), ("9-weight", "9wt"), ("12-weight", "12wt")],
        False,
    ),
}

_FAMILIES_H = [
    # astronomy
    F(
        "tidal_lock_h",
        "astronomy",
        (
            "Which moons of {planet_h} [are|aren't] tidally locked?",
            "List the {planet_h} satellites that [always show|don't always show] the same face to the planet.",
            "{planet_h}'s moons: which ones [keep one side permanently turned toward it|rotate freely instead of being locked]?",
        ),
    ),
    F(
        "messier_sky_h",
        "astronomy",
        (
            "Which Messier objects [can|can't] I spot with {optic_h} under {sky_h} skies?",
            "Under a {sky_h} sky, what Messier targets [are|are not] within reach of {optic_h}?",
            "Messier hunting with {optic_h} at a {sky_h} site: which objects [will show up|won't show up]?",
        ),
    ),
    F(
        "crescent_time_h",
        "astronomy",
        (
            "Is a {mod_phase_h} crescent moon visible in the evening or in the morning?",
            "When should I look for the {mod_phase_h} crescent, after sunset or before dawn?",
            "{mod_phase_h} crescent: evening-sky object or pre-dawn sight?",
        ),
    ),
    F(
        "moon_orbit_dir_h",
        "astronomy",
        (
            "Which moons in the solar system travel in {mod_orbit_h} orbits?",
            "Name the natural satellites that circle their planet on a {mod_orbit_h} path.",
            "Solar system moons with {mod_orbit_h} orbits - which are they?",
        ),
    ),
    F(
        "star_brightness_h",
        "astronomy",
        (
            "Does {star_h} look brighter than {star_h2} from Earth?",
            "Quick check: {star_h} appears brighter than {star_h2} to the naked eye, right?",
            "Naked-eye magnitude question: does {star_h} outshine {star_h2}?",
        ),
    ),
    F(
        "meteor_peak_h",
        "astronomy",
        (
            "Which meteor shower peaks {shower_time_h}?",
            "I want to watch shooting stars {shower_time_h} - what shower is at its maximum then?",
            "Name of the meteor shower that hits its peak {shower_time_h}?",
        ),
    ),
    # pottery
    F(
        "clay_cone_h",
        "pottery",
        (
            "Which clay bodies [can|can't] be safely fired to {cone_h}?",
            "What kinds of clay [will hold up in|won't survive] a {cone_h} firing?",
            "Firing to {cone_h}: which clays [are suitable|are unsuitable]?",
        ),
    ),
    F(
        "tools_needed_h",
        "pottery",
        (
            "Which tools [do I actually need|can I skip] when starting out with {technique_h}?",
            "Getting into {technique_h}: what equipment [is essential|is unnecessary]?",
            "For {technique_h}, list the tools that [are must-haves|aren't worth buying yet].",
        ),
    ),
    F(
        "greenware_dry_h",
        "pottery",
        (
            "How can I {act_dry_h} the drying of my greenware?",
            "What's a good way to {act_dry_h} drying on unfired pieces?",
            "Pots waiting for their bisque firing: any tricks to {act_dry_h} the drying?",
        ),
    ),
    F(
        "copper_color_h",
        "pottery",
        (
            "What color does a copper glaze come out in {mod_atmos_h} firing?",
            "Copper-bearing glaze fired in {mod_atmos_h}: what hue should I expect?",
            "If I fire a copper glaze under {mod_atmos_h} conditions, what color will it turn?",
        ),
    ),
    F(
        "glaze_layer_h",
        "pottery",
        (
            "What happens if I layer {glaze_h} over {glaze_h2}?",
            "Dipping a pot in {glaze_h2} first and then {glaze_h} on top - how will it turn out?",
            "{glaze_h} on top of a base coat of {glaze_h2}: what result should I expect?",
        ),
    ),
    F(
        "glaze_water_h",
        "pottery",
        (
            "How much water should I mix into {glaze_amt_h} of dry glaze powder?",
            "Mixing up {glaze_amt_h} of dry glaze: how much water goes in?",
            "What volume of water do I need to reconstitute {glaze_amt_h} of powdered glaze?",
        ),
    ),
    # fishing
    F(
        "live_bait_h",
        "fishing",
        (
            "What live baits [work|don't work] well for {fish_h}?",
            "Which natural baits [are effective|are a waste of time] when targeting {fish_h}?",
            "Going after {fish_h} with live bait - what [gets bites|rarely gets bites]?",
        ),
    ),
    F(
        "knot_line_h",
        "fishing",
        (
            "Which fishing knots [hold|slip] on {line_h}?",
            "What knots [are reliable|tend to fail] when tied in {line_h}?",
            "Tying knots in {line_h}: which ones [stay secure|come undone]?",
        ),
    ),
    F(
        "striper_tide_h",
        "fishing",
        (
            "Where should I fish for striped bass during the {mod_tide_h} tide?",
            "Stripers on the {mod_tide_h} tide: where do they hold?",
            "Which estuary spots hold the most stripers when the tide is {mod_tide_h}?",
        ),
    ),
    F(
        "drag_fight_h",
        "fishing",
        (
            "When should I {act_drag_h} the drag while fighting a big fish?",
            "At what point in a fight do you {act_drag_h} your reel's drag?",
            "Fighting a fish: at what moments is it right to {act_drag_h} the drag?",
        ),
    ),
    F(
        "bass_spawn_lure_h",
        "fishing",
        (
            "What lures catch largemouth bass {spawn_h}?",
            "Lure picks for largemouth {spawn_h}?",
            "I'm targeting bucketmouths {spawn_h} - what should I throw?",
        ),
    ),
    F(
        "fly_weight_h",
        "fishing",
        (
            "What species can I realistically target with a {flywt_h} fly rod?",
            "Which fish is a {flywt_h} fly outfit suited for?",
            "{flywt_h} fly rod: what's it good for catching?",
        ),
    ),
]

# ==== chess, motorcycles, tattoos (names end with _j) =============================================

_LEXICONS_J: dict[str, Lexicon] = {
    # chess
    "square_j": ("entity", [("d5",), ("h8",), ("g3",), ("b1",)], False),
    "opening_j": (
        "entity",
        [
            ("Najdorf Sicilian", "Sicilian Najdorf"),
            ("French Winawer", "Winawer French"),
            ("Grünfeld", "Grünfeld Defense"),
            ("Stonewall Dutch", "Dutch Stonewall"),
        ],
        False,
    ),
    "mod_struct_j": ("antonym", [("wide-open",), ("locked-up", "blocked")], True),
    "mod_color_j": ("antonym", [("as White", "with White"), ("as Black", "with Black")], True),
    "mate_mat_j": (
        "entity",
        [
            ("two knights",),
            ("a single rook", "one rook"),
            ("two bishops", "the bishop pair"),
            ("a bishop and a knight", "a knight and a bishop"),
        ],
        False,
    ),
    "tc_j": ("tier", [("bullet",), ("blitz",), ("rapid",), ("classical",)], False),
    "chess_aud_j": (
        "audience",
        [
            ("an adult beginner", "a grown-up newcomer to chess"),
            ("a 1600-rated club player", "a club player around 1600"),
            ("a titled player", "a master-strength player"),
        ],
        False,
    ),
    # motorcycles
    "region_j": (
        "entity",
        [("New South Wales", "NSW"), ("British Columbia", "BC"), ("Quebec",), ("Alberta",)],
        False,
    ),
    "act_shift_j": ("antonym", [("upshift", "shift up"), ("downshift", "shift down")], True),
    "lic_j": ("tier", [("A1",), ("A2",), ("full A", "unrestricted A")], False),
    "store_dur_j": (
        "time",
        [
            ("ten days",),
            ("a whole winter", "an entire winter"),
            ("over a year", "more than twelve months"),
        ],
        False,
    ),
    "mod_rider_j": ("antonym", [("solo", "alone"), ("two-up", "with a passenger")], True),
    "bike_type_j": (
        "entity",
        [
            ("sportbikes", "sport bikes"),
            ("cruisers",),
            ("adventure bikes", "ADV bikes"),
            ("dual-sports", "dual-sport bikes"),
        ],
        False,
    ),
    # tattoos
    "heal_j": (
        "time",
        [
            ("in the first 24 hours", "during the first day"),
            ("in the first week", "during week one"),
            ("once it starts peeling", "during the peeling stage"),
        ],
        False,
    ),
    "place_j": (
        "entity",
        [("ribs", "rib cage"), ("inner bicep",), ("outer thigh",), ("spine",)],
        False,
    ),
    "mod_ink_j": (
        "antonym",
        [("full-color", "colored"), ("black-and-grey", "black-and-gray")],
        True,
    ),
    "mod_when_j": (
        "antonym",
        [("ahead of", "in the run-up to"), ("in the days after", "in the aftermath of")],
        True,
    ),
    "sit_len_j": (
        "quantity",
        [("one-hour", "60-minute"), ("five-hour",), ("eight-hour", "all-day")],
        False,
    ),
    "skin_cond_j": (
        "entity",
        [
            ("eczema",),
            ("psoriasis",),
            ("keloid-prone skin", "a tendency to keloid"),
            ("type 1 diabetes",),
        ],
        False,
    ),
}

_FAMILIES_J = [
    # ---- chess
    F(
        "knight_reach_j",
        "chess",
        (
            "On an empty board, which squares [can|can't] a knight placed on {square_j} reach in a single move?",
            "List the squares a knight standing on {square_j} [is able to|is unable to] jump to in one move, with nothing else on the board.",
            "Lone knight on {square_j}: which squares [are reachable|are unreachable] for it in one hop?",
        ),
    ),
    F(
        "opening_traits_j",
        "chess",
        (
            "What are the main [strengths|weaknesses] of the {opening_j} from Black's point of view?",
            "Playing the {opening_j} as Black: what [works in my favor|works against me]?",
            "Explain the [upsides|downsides] of choosing the {opening_j} with the black pieces.",
        ),
    ),
    F(
        "minor_piece_j",
        "chess",
        (
            "In {mod_struct_j} positions, are knights or bishops usually stronger?",
            "Knight vs bishop in a {mod_struct_j} position: which minor piece do I want?",
            "Which minor piece tends to shine when the pawn structure is {mod_struct_j}?",
        ),
    ),
    F(
        "repertoire_j",
        "chess",
        (
            "Suggest a low-maintenance opening repertoire to play {mod_color_j}.",
            "I don't have time to memorize theory. What openings should I use {mod_color_j}?",
            "Easy-to-learn openings {mod_color_j}: what do you recommend?",
        ),
    ),
    F(
        "forced_mate_j",
        "chess",
        (
            "Can a king plus {mate_mat_j} force checkmate against a bare king, and what's the technique?",
            "Endgame question: my king plus {mate_mat_j} versus a lone king. Is it a forced mate, and how do I deliver it?",
            "Explain whether, and how, a king with {mate_mat_j} beats an enemy king that has nothing left.",
        ),
    ),
    F(
        "time_control_switch_j",
        "chess",
        (
            "I'm moving from {tc_j} to {tc_j2} chess. Which habits do I need to change?",
            "Switching over from {tc_j} games to {tc_j2} games: what should I adjust in how I play?",
            "How do I adapt my play when I go from playing {tc_j} to playing {tc_j2}?",
        ),
    ),
    F(
        "study_split_j",
        "chess",
        (
            "How should {chess_aud_j} split their study time between openings, tactics and endgames?",
            "Study plan for {chess_aud_j}: how much time on openings vs tactics vs endgames?",
            "If I'm {chess_aud_j}, what's a sensible balance of opening, tactical and endgame training?",
        ),
    ),
    # ---- motorcycles
    F(
        "gear_law_j",
        "motorcycles",
        (
            "Which pieces of riding gear [are|aren't] legally required for motorcyclists in {region_j}?",
            "Motorcycle gear rules in {region_j}: what [does the law make mandatory|is left optional by law]?",
            "In {region_j}, what protective kit [is a legal must|is legally optional] for bike riders?",
        ),
    ),
    F(
        "smooth_shift_j",
        "motorcycles",
        (
            "How do I {act_shift_j} smoothly on a motorcycle without jerking?",
            "Tips to {act_shift_j} cleanly on my bike so the ride stays smooth?",
            "Motorbike gearbox: what's the right technique to {act_shift_j} without a lurch?",
        ),
    ),
    F(
        "uk_licence_j",
        "motorcycles",
        (
            "What are the age limits and tests for the {lic_j} motorcycle licence in the UK?",
            "UK bike licensing: how old must I be and which tests do I take for the {lic_j} licence?",
            "Tell me the minimum age and test requirements to hold the {lic_j} motorbike licence in Britain.",
        ),
    ),
    F(
        "bike_storage_j",
        "motorcycles",
        (
            "How should I prep my motorcycle to sit unused for {store_dur_j}?",
            "Parking my bike for {store_dur_j}: what do I do about the fuel, battery and tires?",
            "Steps to store a motorbike for {store_dur_j} without it getting damaged?",
        ),
    ),
    F(
        "tire_pressure_j",
        "motorcycles",
        (
            "What tire pressures should I run when riding {mod_rider_j}?",
            "Front and rear PSI for my motorcycle when I ride {mod_rider_j}?",
            "Riding {mod_rider_j}: how much air should go in the tyres?",
        ),
    ),
    F(
        "first_bike_j",
        "motorcycles",
        (
            "Why [are|aren't] {bike_type_j} good first motorcycles for new riders?",
            "New rider here: what makes {bike_type_j} [a smart|a poor] pick for a first bike?",
            "{bike_type_j} as a beginner's first bike: what are the [pros|cons]?",
        ),
    ),
    # ---- tattoos
    F(
        "aftercare_j",
        "tattoos",
        (
            "What [should|shouldn't] I put on my new tattoo {heal_j}?",
            "Fresh ink aftercare {heal_j}: which products [are okay to use|should I avoid]?",
            "{heal_j}, which creams or ointments [are safe|are a bad idea] on a new tattoo?",
        ),
    ),
    F(
        "placement_pain_j",
        "tattoos",
        (
            "How much does getting tattooed on the {place_j} hurt?",
            "On a scale of 1 to 10, how painful is a tattoo on the {place_j}?",
            "Thinking about ink on my {place_j}. How bad is the pain, honestly?",
        ),
    ),
    F(
        "ink_fade_j",
        "tattoos",
        (
            "How quickly does a {mod_ink_j} tattoo fade over the years?",
            "Long term, how fast do {mod_ink_j} tattoos lose their vibrancy?",
            "{mod_ink_j} ink: how many years before it noticeably fades?",
        ),
    ),
    F(
        "laser_care_j",
        "tattoos",
        (
            "What should I do {mod_when_j} a laser tattoo removal session?",
            "Skin care {mod_when_j} a laser removal appointment for my tattoo: what's the routine?",
            "How do I look after my skin {mod_when_j} getting a tattoo lasered off?",
        ),
    ),
    F(
        "long_sitting_j",
        "tattoos",
        (
            "How should I prepare for my {sit_len_j} tattoo session?",
            "Got my {sit_len_j} sitting at the tattoo shop next week. How do I get ready?",
            "Prep checklist for this {sit_len_j} tattoo appointment I've booked?",
        ),
    ),
    F(
        "skin_condition_j",
        "tattoos",
        (
            "What [should|shouldn't] someone with {skin_cond_j} do when getting a tattoo?",
            "I have {skin_cond_j} and want a tattoo. What [do I need to do|must I avoid]?",
            "Getting inked with {skin_cond_j}: which steps [are recommended|are best avoided]?",
        ),
    ),
]

# ==== skiing, languages, perfume (names end with _k) ==============================================

_LEXICONS_K: dict[str, Lexicon] = {
    # skiing
    "resort_k": (
        "entity",
        [
            ("Chamonix",),
            ("Verbier",),
            ("Jackson Hole",),
            ("Niseko",),
            ("Val d'Isère", "Val d'Isere"),
        ],
        False,
    ),
    "ski_aud_k": (
        "audience",
        [
            ("skiers coming back from ACL surgery", "skiers rehabbing an ACL reconstruction"),
            ("pregnant skiers", "expectant skiers"),
            ("skiers in their seventies", "septuagenarian skiers"),
            ("teenage ski racers", "teen racers"),
        ],
        False,
    ),
    "mod_snow_k": (
        "antonym",
        [("deep powder", "bottomless powder"), ("boilerplate ice", "bulletproof ice")],
        True,
    ),
    "act_din_k": ("antonym", [("turn up", "ratchet up"), ("turn down", "ratchet down")], True),
    "trail_k": (
        "tier",
        [
            ("green circle",),
            ("blue square",),
            ("black diamond",),
            ("double black diamond", "double-black"),
        ],
        False,
    ),
    "slope_k": (
        "quantity",
        [("25 degrees", "25°"), ("38 degrees", "38°"), ("50 degrees", "50°")],
        False,
    ),
    # languages
    "lang_family_k": (
        "entity",
        [("Romance",), ("Slavic",), ("Germanic",), ("Celtic",), ("Indo-Aryan",)],
        False,
    ),
    "lang_k": (
        "entity",
        [("Brazilian Portuguese",), ("Polish",), ("Catalan",), ("Romanian",)],
        False,
    ),
    "mod_register_k": ("antonym", [("formal",), ("informal", "casual")], True),
    "act_pace_k": ("antonym", [("ramp up", "step up"), ("rein in",)], True),
    "tongue_k": (
        "entity",
        [
            ("Hungarian",),
            ("Vietnamese",),
            ("Swahili", "Kiswahili"),
            ("Finnish",),
            ("Tagalog",),
            ("Indonesian", "Bahasa Indonesia"),
        ],
        False,
    ),
    "cefr_k": ("tier", [("A2",), ("B1",), ("B2",), ("C1",)], False),
    # perfume
    "scent_family_k": (
        "entity",
        [("chypre",), ("fougère", "fougere"), ("gourmand",), ("leather",)],
        False,
    ),
    "note_k": (
        "entity",
        [
            ("vetiver",),
            ("oud", "agarwood"),
            ("tonka bean", "tonka"),
            ("orris root", "orris"),
            ("neroli",),
            ("labdanum",),
        ],
        False,
    ),
    "act_projection_k": ("antonym", [("amplify", "pump up"), ("tone down", "dial back")], True),
    "mod_note_k": ("antonym", [("top", "head"), ("bottom",)], True),
    "conc_k": (
        "tier",
        [
            ("eau fraîche", "eau fraiche"),
            ("eau de toilette", "EDT"),
            ("eau de parfum", "EDP"),
            ("extrait de parfum", "extrait"),
        ],
        False,
    ),
    "bottle_k": (
        "quantity",
        [("15 ml", "15ml"), ("50 ml", "50ml"), ("100 ml", "100ml"), ("200 ml", "200ml")],
        False,
    ),
    "freq_k": (
        "time",
        [
            ("every single day", "each and every day"),
            ("twice a week", "two days a week"),
            ("only once a month", "just once a month"),
        ],
        False,
    ),
}

_FAMILIES_K = [
    # ---- skiing ----
    F(
        "offpiste_zones_k",
        "skiing",
        (
            "At {resort_k}, which areas [are open to|are closed to] off-piste skiers without a guide?",
            "Where at {resort_k} [is it allowed|is it forbidden] to ski off-piste without hiring a guide?",
            "Unguided off-piste in {resort_k}: which zones [are permitted|are off-limits]?",
            "Planning some freeride laps at {resort_k} with no guide. Which sectors [can I ski|do I have to stay out of]?",
        ),
    ),
    F(
        "dryland_prep_k",
        "skiing",
        (
            "Which dryland exercises [are|aren't] a good idea for {ski_aud_k} getting ready for the season?",
            "Preseason conditioning for {ski_aud_k}: which off-snow workouts [are recommended|should be avoided]?",
            "What gym moves [should|shouldn't] {ski_aud_k} do to prep their legs before winter?",
            "I'm putting together a pre-ski-season training plan for {ski_aud_k}. Which exercises [belong in it|should stay out of it]?",
        ),
    ),
    F(
        "ski_width_k",
        "skiing",
        (
            "What ski waist width works best for {mod_snow_k} conditions?",
            "How wide underfoot should my skis be when I'm skiing on {mod_snow_k}?",
            "Picking skis for {mod_snow_k} - narrow or fat, what width am I after?",
            "Ideal underfoot measurement for a ski used on {mod_snow_k}?",
        ),
    ),
    F(
        "din_adjust_k",
        "skiing",
        (
            "When should I {act_din_k} the DIN setting on my ski bindings?",
            "What are the signs I need to {act_din_k} my binding release value?",
            "Ski bindings: in which situations do you {act_din_k} the DIN number?",
            "How do I know it's time to {act_din_k} my DINs?",
        ),
    ),
    F(
        "trail_lessons_k",
        "skiing",
        (
            "How many lessons does a first-time adult skier usually need before handling {trail_k} runs?",
            "Total beginner here (adult) - roughly how many lessons until I can ski {trail_k} trails?",
            "Grown-up learning to ski from scratch: number of lessons before being ready for {trail_k} slopes?",
            "Typically, after how many ski lessons can an adult novice manage {trail_k} terrain?",
        ),
    ),
    F(
        "slab_angle_k",
        "skiing",
        (
            "How likely is a slab avalanche on a slope of {slope_k}?",
            "Avalanche risk on a slope angled at {slope_k}: how high is it?",
            "Backcountry question: would a slope at {slope_k} be likely to release a slab?",
            "What are the odds of triggering a slab slide on terrain pitched at {slope_k}?",
        ),
    ),
    # ---- languages ----
    F(
        "gender_nouns_k",
        "languages",
        (
            "Which {lang_family_k} languages [have|lack] grammatical gender?",
            "In the {lang_family_k} family, which languages [assign|don't assign] a grammatical gender to nouns?",
            "{lang_family_k} languages [with|without] gendered nouns - which ones?",
            "Quick one: among the {lang_family_k} languages, which [use|don't use] grammatical gender?",
        ),
    ),
    F(
        "final_letters_k",
        "languages",
        (
            "In {lang_k}, which letters at the end of a word [are pronounced|are silent]?",
            "Which word-final letters [do you pronounce|do you leave silent] in {lang_k}?",
            "{lang_k} pronunciation: final letters that [get sounded out|go silent]?",
            "I'm learning {lang_k} - which letters at the very end of words [do I actually say|do I drop]?",
        ),
    ),
    F(
        "register_email_k",
        "languages",
        (
            "How do I write {mod_register_k} emails in {lang_k}?",
            "What's the right way to word {mod_register_k} emails when writing in {lang_k}?",
            "Emailing people in {lang_k}: how do I keep the tone {mod_register_k}?",
            "Tips for composing {mod_register_k} {lang_k} emails - greetings, sign-offs and so on?",
        ),
    ),
    F(
        "speaking_pace_k",
        "languages",
        (
            "How can I {act_pace_k} my speaking pace in a language I'm still learning?",
            "Tips to {act_pace_k} my talking speed in my target language?",
            "I'm learning a foreign language and want to {act_pace_k} my tempo when I speak it. How do I train that?",
            "Ways to {act_pace_k} the speed of my speech when conversing in a second language?",
        ),
    ),
    F(
        "learn_difficulty_k",
        "languages",
        (
            "As a native {tongue_k} speaker, how hard would it be to learn {tongue_k2}?",
            "How difficult is {tongue_k2} for someone whose first language is {tongue_k}?",
            "{tongue_k} is my mother tongue - how tough is {tongue_k2} going to be to pick up?",
            "Difficulty of learning {tongue_k2} when you grew up speaking {tongue_k}?",
        ),
    ),
    F(
        "cefr_hours_k",
        "languages",
        (
            "Starting from scratch, how many hours of study does it take to reach {cefr_k} in {tongue_k}?",
            "Roughly how many study hours to get from zero to {cefr_k} level in {tongue_k}?",
            "{tongue_k} for complete beginners: estimated hours needed to hit {cefr_k}?",
            "If I start {tongue_k} with no prior knowledge, how much study time before I'm at {cefr_k}?",
        ),
    ),
    # ---- perfume ----
    F(
        "synthetic_notes_k",
        "perfume",
        (
            "Which ingredients in {scent_family_k} perfumes are usually [synthetic|natural]?",
            "In a typical {scent_family_k} fragrance, which materials [are made in a lab|come from nature]?",
            "{scent_family_k} scents: which of their common components [are lab-made|are natural extracts]?",
            "Curious about {scent_family_k} perfumery - which of the classic ingredients [are synthetics|are naturals]?",
        ),
    ),
    F(
        "layer_pairing_k",
        "perfume",
        (
            "Which notes [pair well|clash] with {note_k} when layering perfumes?",
            "What scents [go nicely|don't go] with {note_k} if I layer fragrances?",
            "Layering around {note_k}: which notes [complement it|fight with it]?",
            "I want to layer something over my {note_k} perfume. Which notes [would match|would clash]?",
        ),
    ),
    F(
        "projection_k",
        "perfume",
        (
            "How can I {act_projection_k} my perfume's projection without buying a new bottle?",
            "Ways to {act_projection_k} how far my fragrance projects, using the bottle I already own?",
            "Same perfume, no new purchase - how do I {act_projection_k} how strongly it projects?",
            "Tricks to {act_projection_k} the projection of a scent I already have?",
        ),
    ),
    F(
        "pyramid_notes_k",
        "perfume",
        (
            "What are the typical {mod_note_k} notes in {scent_family_k} perfumes?",
            "Which materials usually make up the {mod_note_k} notes of {scent_family_k} fragrances?",
            "{scent_family_k} scents - common {mod_note_k} notes?",
            "In {scent_family_k} perfumery, which ingredients typically serve as {mod_note_k} notes?",
        ),
    ),
    F(
        "conc_longevity_k",
        "perfume",
        (
            "How many hours does an {conc_k} usually last on skin?",
            "Typical longevity on skin for an {conc_k}?",
            "If I spray an {conc_k}, how long before it fades from my skin?",
            "How long does a spritz of {conc_k} stick around on the skin, on average?",
        ),
    ),
    F(
        "bottle_lifespan_k",
        "perfume",
        (
            "How long will a {bottle_k} bottle of perfume last if I wear it {freq_k} with 3 sprays?",
            "I use about three sprays each time and put it on {freq_k}. How long until a {bottle_k} bottle runs out?",
            "Lifespan of a {bottle_k} fragrance at 3 sprays per wear, worn {freq_k}?",
            "Wearing perfume {freq_k}, three sprays a go: when will my {bottle_k} bottle be empty?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_H, **_LEXICONS_J, **_LEXICONS_K}
FAMILIES: list[F] = _FAMILIES_H + _FAMILIES_J + _FAMILIES_K
