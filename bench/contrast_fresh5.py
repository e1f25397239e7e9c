"""A sixth held-out set for the semantic verifier (written 2026-12-07, frozen since).

Why: the five earlier held-out sets have each decided something and been looked at since; the
verifier trained with the second round of written triplets and their conversations
(bench/data/written_train.jsonl, written at the same time) needs data nobody has seen to be
decided on. These 54 families were written for it, by three people in parallel from one
brief, before any model was run on them: in nine domains no other family has
(contrast_data.FRESH5_DOMAINS), with lexicons that repeat no value of any other lexicon and name
no distinctive value the written triplets use (checked). Rows: ``contrast_fresh5.jsonl`` and
``multiturn_fresh5.jsonl`` (seed 19); nothing trains or calibrates on them. Never tune on them:
measure.

Lexicon and family names end with the letter of the part they come from (``_i``, ``_l``, ``_m``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== scuba, golf, sewing (names end with _i) ====================================================

_LEXICONS_I: dict[str, Lexicon] = {
    # scuba
    "sea_i": (
        "entity",
        [("the Red Sea",), ("the Caribbean",), ("the Great Barrier Reef",), ("the Mediterranean",)],
        False,
    ),
    "cert_i": ("tier", [("Advanced Open Water", "AOW"), ("Rescue Diver",), ("Divemaster",)], False),
    "act_ascend_i": (
        "antonym",
        [("ascend", "make my way up"), ("descend", "make my way down")],
        True,
    ),
    "mod_water_i": ("antonym", [("cold-water",), ("warm-water", "tropical")], True),
    "interval_i": (
        "time",
        [("30-minute", "half-hour"), ("90-minute", "ninety-minute"), ("three-hour", "3-hour")],
        False,
    ),
    "depth_i": (
        "quantity",
        [("60 feet", "60 ft"), ("80 feet", "80 ft"), ("100 feet", "100 ft")],
        False,
    ),
    "agency_i": ("entity", [("PADI",), ("SSI",), ("NAUI",), ("BSAC",)], False),
    # golf
    "golfer_i": (
        "audience",
        [
            ("a total beginner", "a brand-new golfer"),
            ("a senior golfer", "an older player"),
            ("a scratch golfer", "a low handicapper"),
            ("a junior golfer", "a young golfer"),
        ],
        False,
    ),
    "area_i": (
        "entity",
        [
            ("in a bunker", "in a sand trap"),
            ("in a penalty area", "in a water hazard"),
            ("on the putting green",),
            ("in the teeing area", "on the tee box"),
        ],
        False,
    ),
    "mod_curve_i": ("antonym", [("slice",), ("hook",)], True),
    "mod_slope_i": (
        "antonym",
        [("above my feet", "higher than my feet"), ("below my feet", "lower than my feet")],
        True,
    ),
    "speed_i": (
        "quantity",
        [
            ("75 mph", "75 miles per hour"),
            ("90 mph", "90 miles per hour"),
            ("105 mph", "105 miles per hour"),
            ("120 mph", "120 miles per hour"),
        ],
        False,
    ),
    "member_i": (
        "tier",
        [("full", "seven-day"), ("weekday-only", "five-day"), ("social", "clubhouse-only")],
        False,
    ),
    # sewing
    "dots_i": (
        "quantity",
        [
            ("one dot", "the one-dot setting"),
            ("two dots", "the two-dot setting"),
            ("three dots", "the three-dot setting"),
        ],
        False,
    ),
    "fabric_i": (
        "entity",
        [("crushed velvet",), ("organza",), ("oilcloth",), ("boiled wool",)],
        False,
    ),
    "act_hem_i": ("antonym", [("let down", "drop"), ("take up",)], True),
    "mod_weight_i": ("antonym", [("lightweight",), ("heavyweight",)], True),
    "freq_i": (
        "time",
        [
            ("most days", "nearly daily"),
            ("two or three times a month", "a couple of times a month"),
            ("a few times a year", "just a handful of times a year"),
        ],
        False,
    ),
    "brand_i": ("entity", [("Bernina",), ("Janome",), ("Juki",), ("Pfaff",)], False),
}

_FAMILIES_I = [
    # ---- scuba
    F(
        "touch_hazard_i",
        "scuba",
        (
            "Which sea creatures [are|aren't] dangerous to touch when diving around {sea_i}?",
            "Reef diving in {sea_i}: what marine life [should I keep my hands off|is harmless to brush against]?",
            "List the animals down there in {sea_i} that [can hurt you|pose no risk] if a diver makes contact with them.",
        ),
    ),
    F(
        "course_skills_i",
        "scuba",
        (
            "Which skills [are|aren't] part of the {cert_i} course?",
            "Signing up for {cert_i} training soon - what [will|won't] the instructor test me on?",
            "{cert_i} certification: tell me the drills it [includes|leaves out].",
        ),
    ),
    F(
        "ascent_rate_i",
        "scuba",
        (
            "How fast should I {act_ascend_i} on a recreational dive?",
            "What's a safe speed to {act_ascend_i} through the water column with a tank on my back?",
            "Max rate per minute to {act_ascend_i} for a sport diver?",
        ),
    ),
    F(
        "reg_setup_i",
        "scuba",
        (
            "What regulator setup do you recommend for {mod_water_i} diving?",
            "Picking a reg for {mod_water_i} dives - which features actually matter?",
            "Best first and second stage configuration for {mod_water_i} scuba, in your opinion?",
        ),
    ),
    F(
        "repeat_ndl_i",
        "scuba",
        (
            "After a {interval_i} surface interval, how long can I stay at {depth_i} on my second dive without going into deco?",
            "What's my no-stop limit for a repeat dive to {depth_i} following a {interval_i} break on the surface?",
            "Second tank of the day, {depth_i} max, {interval_i} gap since the first one: how much bottom time do I get?",
        ),
    ),
    F(
        "crossover_i",
        "scuba",
        (
            "How do I cross over my {cert_i} card from {agency_i} to {agency_i2}?",
            "I'm certified {cert_i} with {agency_i}. What does it take to get the equivalent {agency_i2} card?",
            "Converting my {agency_i} {cert_i} certification into {agency_i2}'s version: what are the steps?",
        ),
    ),
    # ---- golf
    F(
        "bag_clubs_i",
        "golf",
        (
            "Which clubs [should|shouldn't] {golfer_i} carry in the bag?",
            "Building a 14-club set for {golfer_i}: what [belongs in it|should be left out]?",
            "What sticks [make sense|make no sense] for {golfer_i} to have on the course?",
        ),
    ),
    F(
        "area_penalty_i",
        "golf",
        (
            "Which actions [are|are not] penalized when my ball is {area_i}?",
            "Rules check: with the ball lying {area_i}, what [costs me|doesn't cost me] a penalty stroke?",
            "My shot ended up {area_i}. What [am I forbidden|am I free] to do before I hit?",
        ),
    ),
    F(
        "fix_curve_i",
        "golf",
        (
            "How do I fix a {mod_curve_i} off the tee?",
            "My drives keep turning into a nasty {mod_curve_i}. Any drills to cure it?",
            "Swing fault with the driver, a {mod_curve_i}: which grip or path changes straighten it out?",
        ),
    ),
    F(
        "slope_stance_i",
        "golf",
        (
            "How should I set up when the ball sits {mod_slope_i} on a sidehill lie?",
            "Sidehill shot with the ball {mod_slope_i}: how do I stand and where do I aim?",
            "Adjustments for a side-slope lie, ball {mod_slope_i} - posture, grip, aim?",
        ),
    ),
    F(
        "shaft_flex_i",
        "golf",
        (
            "What shaft flex suits a driver swing speed of {speed_i}?",
            "I swing my driver at about {speed_i}. Regular, stiff or extra stiff?",
            "Driver shaft stiffness for someone clocking {speed_i} clubhead speed: which one should I buy?",
        ),
    ),
    F(
        "club_membership_i",
        "golf",
        (
            "What's included in a {member_i} membership at a private golf club?",
            "Thinking of joining a country club on the {member_i} plan. What perks and tee-time access would I get?",
            "{member_i} golf club membership: which privileges come with it?",
        ),
    ),
    # ---- sewing
    F(
        "iron_heat_i",
        "sewing",
        (
            "Which fabrics [are safe|are unsafe] to press with the iron on {dots_i}?",
            "Iron set to {dots_i}: what materials [can I press without damage|will get scorched or melted]?",
            "Tell me which cloth [tolerates|can't tolerate] an iron turned to {dots_i}.",
        ),
    ),
    F(
        "mark_fabric_i",
        "sewing",
        (
            "What [should|shouldn't] I use to mark {fabric_i} before cutting?",
            "Transferring pattern markings onto {fabric_i}: which tools [are safe to use|should I avoid]?",
            "Marking pens and chalks for {fabric_i} - which ones [are recommended|are a bad idea]?",
        ),
    ),
    F(
        "hem_length_i",
        "sewing",
        (
            "How do I {act_hem_i} the hem on my trousers?",
            "Need to {act_hem_i} the hems of some pants, what's the process?",
            "Altering slacks: steps to {act_hem_i} the leg hem neatly?",
        ),
    ),
    F(
        "needle_weight_i",
        "sewing",
        (
            "Which needle size should I use for {mod_weight_i} fabric?",
            "Sewing {mod_weight_i} material - what machine needle number works best?",
            "Needle pick for {mod_weight_i} cloth: 70/10, 90/14, 100/16, or something else?",
        ),
    ),
    F(
        "machine_oil_i",
        "sewing",
        (
            "How often should I oil and clean my sewing machine if I sew {freq_i}?",
            "I use my machine {freq_i}. What's a sensible schedule for lubricating it and clearing out lint?",
            "Sewing machine upkeep when you stitch {freq_i}: how frequently to dust out and oil?",
        ),
    ),
    F(
        "bobbin_brand_i",
        "sewing",
        (
            "How do I load the bobbin on a {brand_i} sewing machine?",
            "Step-by-step please: putting the bobbin into my {brand_i}.",
            "Where does the bobbin go, and which way should it unwind, on {brand_i} machines?",
        ),
    ),
]

# ==== birding, dance, archery (names end with _l) ================================================

_LEXICONS_L: dict[str, Lexicon] = {
    # birding
    "act_lure_l": ("antonym", [("lure in", "draw in"), ("scare off", "drive away")], True),
    "yardbird_l": (
        "entity",
        [
            ("ruby-throated hummingbirds", "ruby-throats"),
            ("woodpeckers",),
            ("goldfinches",),
            ("bluebirds",),
            ("orioles",),
        ],
        False,
    ),
    "mod_migr_l": (
        "antonym",
        [("spring migration", "northbound migration"), ("fall migration", "autumn migration")],
        True,
    ),
    "optic_mag_l": ("quantity", [("8x",), ("10x",), ("12x",)], False),
    "chorus_time_l": (
        "time",
        [
            ("just before sunrise", "in the predawn hour"),
            ("in the heat of midday", "at high noon"),
            ("in the hours after sunset", "once night has fallen"),
        ],
        False,
    ),
    "birder_aud_l": (
        "audience",
        [
            ("first-time birders", "novice birders"),
            ("seasoned listers", "veteran birders"),
            ("birders with limited mobility", "wheelchair-using birders"),
        ],
        False,
    ),
    # dance
    "act_lead_l": ("antonym", [("lead",), ("follow",)], True),
    "partner_dance_l": (
        "entity",
        [
            ("salsa",),
            ("bachata",),
            ("Argentine tango",),
            ("West Coast Swing", "WCS"),
            ("lindy hop",),
        ],
        False,
    ),
    "ballroom_l": (
        "entity",
        [("quickstep",), ("Viennese waltz",), ("slow foxtrot",), ("cha-cha-cha", "cha cha")],
        False,
    ),
    "syllabus_l": (
        "tier",
        [
            ("Bronze syllabus", "Bronze-level syllabus"),
            ("Silver syllabus", "Silver-level syllabus"),
            ("Gold syllabus", "Gold-level syllabus"),
        ],
        False,
    ),
    "comp_time_l": (
        "time",
        [
            ("in the final week before a competition", "during the last week before a comp"),
            ("in the off-season", "between competition seasons"),
            ("in the few days after a competition", "right after a comp"),
        ],
        False,
    ),
    "pointe_age_l": (
        "time",
        [
            ("at age eight", "at 8 years old"),
            ("at age eleven", "at 11 years old"),
            ("at age fourteen", "at 14 years old"),
        ],
        False,
    ),
    "mod_turn_l": ("antonym", [("en dehors", "outward"), ("en dedans", "inward")], True),
    # archery
    "act_string_l": ("antonym", [("string",), ("unstring",)], True),
    "bow_type_l": (
        "entity",
        [
            ("takedown recurve", "take-down recurve"),
            ("English longbow",),
            ("wooden selfbow", "self bow"),
            ("horse bow", "Asiatic horsebow"),
        ],
        False,
    ),
    "draw_wt_l": (
        "quantity",
        [("20 lb", "20 pounds"), ("32 lb", "32 pounds"), ("45 lb", "45 pounds")],
        False,
    ),
    "archer_aud_l": (
        "audience",
        [
            ("archers in their first season", "first-season archers"),
            ("archers over 65", "archers past retirement age"),
            ("seated archers", "archers who shoot from a wheelchair"),
        ],
        False,
    ),
    "bow_div_l": (
        "entity",
        [("barebow",), ("Olympic recurve",), ("compound",), ("longbow",)],
        False,
    ),
    "mod_eye_l": (
        "antonym",
        [("left-eye dominant", "left-eyed"), ("right-eye dominant", "right-eyed")],
        True,
    ),
    "agb_class_l": (
        "tier",
        [("Bowman",), ("Master Bowman",), ("Grand Master Bowman", "GMB")],
        False,
    ),
}

_FAMILIES_L = [
    # ---- birding
    F(
        "yard_lure_l",
        "birding",
        (
            "How do I {act_lure_l} {yardbird_l} around my backyard feeders?",
            "Any tricks that actually work to {act_lure_l} {yardbird_l} in a suburban garden?",
            "Garden question: what's the best way to {act_lure_l} {yardbird_l}?",
        ),
    ),
    F(
        "feeder_treats_l",
        "birding",
        (
            "What foods [are|are not] safe to offer {yardbird_l} at a feeder?",
            "Feeder menu for {yardbird_l}: which treats [can I put out|should never go in it]?",
            "Which things [is it okay|is it a bad idea] to leave out for {yardbird_l} to eat?",
        ),
    ),
    F(
        "gulf_warblers_l",
        "birding",
        (
            "When does {mod_migr_l} peak for warblers along the Gulf Coast?",
            "Peak dates for warbler {mod_migr_l} on the Gulf Coast?",
            "I'm planning a Gulf Coast trip around {mod_migr_l} - which weeks give the best shot at warblers?",
        ),
    ),
    F(
        "handheld_optics_l",
        "birding",
        (
            "Are {optic_mag_l} binoculars steady enough to hold by hand without a tripod?",
            "Can I use {optic_mag_l} bins handheld, or will the image shake too much?",
            "Shaky view worry: do {optic_mag_l} binoculars need a support, or is freehand fine?",
        ),
    ),
    F(
        "woodland_song_l",
        "birding",
        (
            "Which bird species are most likely to be singing {chorus_time_l} in an eastern deciduous forest in May?",
            "Eastern hardwood woods in May: what birds will I hear calling {chorus_time_l}?",
            "If I go for a walk in an eastern broadleaf forest {chorus_time_l} in May, whose songs should I expect?",
        ),
    ),
    F(
        "field_guide_pick_l",
        "birding",
        (
            "Which North American bird field guide would you recommend for {birder_aud_l}?",
            "Best field guide to the birds of North America for {birder_aud_l}?",
            "Looking for a bird ID book covering the US and Canada, aimed at {birder_aud_l} - what should I get?",
        ),
    ),
    # ---- dance
    F(
        "social_partnering_l",
        "dance",
        (
            "How can I learn to {act_lead_l} better in {partner_dance_l}?",
            "Tips for someone trying to {act_lead_l} more smoothly at {partner_dance_l} socials?",
            "Social dancing {partner_dance_l}: what should I work on to {act_lead_l} well?",
        ),
    ),
    F(
        "style_switch_l",
        "dance",
        (
            "Switching from {partner_dance_l} to {partner_dance_l2}: what habits will I need to unlearn?",
            "I've danced {partner_dance_l} for years and I'm just starting {partner_dance_l2} - which old habits will get in my way?",
            "What technique tends to carry over badly when someone who dances {partner_dance_l} takes up {partner_dance_l2}?",
        ),
    ),
    F(
        "syllabus_figures_l",
        "dance",
        (
            "Which figures [are|are not] permitted in a {ballroom_l} routine under the {syllabus_l}?",
            "{syllabus_l} {ballroom_l}: what steps [am I allowed to|am I barred from] put in my choreography?",
            "For a restricted {ballroom_l} event danced to the {syllabus_l}, which moves [can|can't] be used?",
        ),
    ),
    F(
        "comp_training_l",
        "dance",
        (
            "What kind of training [should|shouldn't] a competitive ballroom dancer do {comp_time_l}?",
            "Ballroom competitor here - which workouts [are smart|are a mistake] {comp_time_l}?",
            "Planning my practice {comp_time_l}: which sessions [belong on|should stay off] a ballroom dancer's schedule?",
        ),
    ),
    F(
        "pointe_start_l",
        "dance",
        (
            "Is it safe for a ballet student to begin pointe work {pointe_age_l}?",
            "Starting pointe shoes {pointe_age_l}: too early, or generally fine?",
            "My kid wants to go en pointe {pointe_age_l}. Should the ballet teacher allow it?",
        ),
    ),
    F(
        "pirouette_prep_l",
        "dance",
        (
            "What's the correct preparation for an {mod_turn_l} pirouette?",
            "How should I set up before turning an {mod_turn_l} pirouette?",
            "Ballet class help: proper prep position and push-off for {mod_turn_l} pirouettes?",
        ),
    ),
    # ---- archery
    F(
        "bow_stringing_l",
        "archery",
        (
            "What's the safest way to {act_string_l} my {bow_type_l}?",
            "How should I {act_string_l} my {bow_type_l} without twisting or damaging a limb?",
            "Need to {act_string_l} this {bow_type_l} - walk me through doing it properly.",
        ),
    ),
    F(
        "arrow_match_l",
        "archery",
        (
            "Which arrow types [are|aren't] safe to shoot from my {bow_type_l}?",
            "Shooting with my {bow_type_l}: what kinds of arrows [can I use|should I never use]?",
            "What shafts [work fine|are dangerous] to loose from this {bow_type_l} of mine?",
        ),
    ),
    F(
        "draw_weight_fit_l",
        "archery",
        (
            "Is a draw weight of {draw_wt_l} sensible for {archer_aud_l}?",
            "Would {archer_aud_l} manage a bow drawing {draw_wt_l}, or is it too much?",
            "Picking a bow for {archer_aud_l} - is {draw_wt_l} at full draw a reasonable choice?",
        ),
    ),
    F(
        "division_kit_l",
        "archery",
        (
            "What equipment [is|isn't] allowed in the {bow_div_l} division at target archery tournaments?",
            "Entering a target shoot in the {bow_div_l} class: which accessories [may I fit|am I banned from fitting] on my bow?",
            "Shooting {bow_div_l} at a sanctioned competition - what gear [is legal|gets you disqualified]?",
        ),
    ),
    F(
        "cross_dominance_l",
        "archery",
        (
            "I'm right-handed but {mod_eye_l}. Which hand should I draw the string with?",
            "Right hander who's {mod_eye_l}: should I buy a bow for a right-hand or left-hand draw?",
            "Being {mod_eye_l} while writing with my right hand, which way round should I shoot a bow?",
        ),
    ),
    F(
        "agb_classification_l",
        "archery",
        (
            "What do I need to achieve to earn the Archery GB {agb_class_l} classification?",
            "Requirements for reaching {agb_class_l} status in Archery GB's classification scheme?",
            "How does a UK archer get classified as {agb_class_l}? What scores and events count?",
        ),
    ),
]

# ==== equestrian, surfing, calligraphy (names end with _m) =======================================

_LEXICONS_M: dict[str, Lexicon] = {
    # equestrian
    "disc_m": (
        "entity",
        [("dressage",), ("show jumping", "showjumping"), ("endurance riding",), ("barrel racing",)],
        False,
    ),
    "rider_m": (
        "audience",
        [
            ("a nervous adult beginner", "a timid adult novice"),
            ("a teenager moving up the levels", "a teen rider moving up the grades"),
            ("a professional competitor", "a pro rider"),
        ],
        False,
    ),
    "cond_m": (
        "entity",
        [
            ("insulin resistance", "IR"),
            ("PPID", "Cushing's disease"),
            ("gastric ulcers", "stomach ulcers"),
            ("HYPP",),
        ],
        False,
    ),
    "act_tack_m": (
        "antonym",
        [("saddle and bridle", "put the tack on"), ("untack", "strip the tack off")],
        True,
    ),
    "mod_clip_m": (
        "antonym",
        [("body-clipped", "fully clipped"), ("unclipped", "full-coated")],
        True,
    ),
    "level_m": (
        "tier",
        [("Training Level",), ("First Level",), ("Third Level",), ("Fourth Level",)],
        False,
    ),
    "horsewt_m": ("quantity", [("400 kg",), ("500 kg", "1,100 lb"), ("650 kg",)], False),
    # surfing
    "break_m": (
        "entity",
        [("reef break",), ("point break",), ("beach break", "sandbar break")],
        False,
    ),
    "spot_m": ("entity", [("Ericeira",), ("Taghazout",), ("Hossegor",), ("Raglan",)], False),
    "season_m": (
        "time",
        [
            ("from November to March", "between November and March"),
            ("from June to September", "between June and September"),
            ("during April and May", "in April and May"),
        ],
        False,
    ),
    "mod_stance_m": (
        "antonym",
        [("regular-footed", "regular-foot"), ("goofy-footed", "goofy-foot")],
        True,
    ),
    "act_wax_m": ("antonym", [("wax", "put wax on"), ("strip the wax off", "dewax")], True),
    "temp_m": ("quantity", [("12°C", "54°F"), ("16°C", "61°F"), ("20°C", "68°F")], False),
    "surfer_m": (
        "audience",
        [
            ("a brand-new surfer", "someone who has never surfed"),
            (
                "an intermediate who rides green waves",
                "a surfer who can already ride unbroken waves",
            ),
            ("a competitive pro", "a contest-level pro"),
        ],
        False,
    ),
    # calligraphy
    "ink_m": (
        "entity",
        [("iron gall ink", "iron gall"), ("sumi ink", "sumi"), ("walnut ink",), ("acrylic ink",)],
        False,
    ),
    "script_m": ("entity", [("Copperplate",), ("Italic",), ("Uncial",), ("Blackletter",)], False),
    "mod_stroke_m": (
        "antonym",
        [("hairline upstroke", "thin upstroke"), ("shaded downstroke", "swelled downstroke")],
        True,
    ),
    "mod_hand_m": (
        "antonym",
        [("left-handed", "left-hand-dominant"), ("right-handed", "right-hand-dominant")],
        True,
    ),
    "nibw_m": ("quantity", [("2 mm",), ("3.8 mm",), ("5 mm",)], False),
    "freq_m": (
        "time",
        [
            ("fifteen minutes a day", "15 minutes daily"),
            ("one hour a week", "an hour weekly"),
            ("one long session every weekend", "a whole afternoon each weekend"),
        ],
        False,
    ),
}

_FAMILIES_M = [
    # ---------------- equestrian ----------------
    F(
        "breed_fit_m",
        "equestrian",
        (
            "Which horse breeds [are|aren't] a good fit for {disc_m} for {rider_m}?",
            "I'm looking for a horse for {rider_m} who wants to do {disc_m}. What breeds [should I consider|should I steer clear of]?",
            "{disc_m} horse for {rider_m}: which breeds [make sense|are a bad idea]?",
        ),
    ),
    F(
        "treats_cond_m",
        "equestrian",
        (
            "Which treats [are|aren't] safe to give a horse with {cond_m}?",
            "My mare has {cond_m}. What snacks [can I still feed her|do I need to cut out]?",
            "Horse diagnosed with {cond_m} - treats that [are fine|should be avoided]?",
        ),
    ),
    F(
        "tack_order_m",
        "equestrian",
        (
            "What's the safest order to {act_tack_m} my horse?",
            "In what sequence should I {act_tack_m} a young horse standing in the crossties?",
            "Step by step, how do you {act_tack_m} a horse without getting kicked or stepped on?",
        ),
    ),
    F(
        "blanket_clip_m",
        "equestrian",
        (
            "What blanket weight do {mod_clip_m} horses need when nights drop to about 0°C?",
            "How heavy a rug should I put on my {mod_clip_m} gelding when it's near freezing overnight?",
            "Near-freezing nights, my horse lives out and is {mod_clip_m}: which turnout weight?",
        ),
    ),
    F(
        "dressage_level_m",
        "equestrian",
        (
            "Which movements are in the {level_m} dressage tests?",
            "What will the judge ask me to ride at {level_m}?",
            "Riding {level_m} dressage next month, so what figures and movements do the tests include?",
        ),
    ),
    F(
        "hay_amount_m",
        "equestrian",
        (
            "How much hay per day should a {horsewt_m} horse eat?",
            "Daily forage ration for a horse that weighs {horsewt_m}?",
            "My gelding is roughly {horsewt_m}. How many kilos of hay does he need every 24 hours?",
        ),
    ),
    # ---------------- surfing ----------------
    F(
        "tide_break_m",
        "surfing",
        (
            "What tides [are|aren't] good for surfing a {break_m}?",
            "At a {break_m}, which stages of the tide [usually work|usually don't work]?",
            "Tide question for a {break_m}: when [does it tend to fire|is it usually unsurfable]?",
        ),
    ),
    F(
        "beginner_spots_m",
        "surfing",
        (
            "Which surf spots around {spot_m} [are|aren't] beginner-friendly {season_m}?",
            "Learning to surf near {spot_m} {season_m}. Which breaks [are a good idea|should I avoid]?",
            "If I'm a total learner visiting {spot_m} {season_m}, what spots [would suit me|are too dangerous for me]?",
        ),
    ),
    F(
        "stance_side_m",
        "surfing",
        (
            "On a left-hand wave, am I going frontside or backside as a {mod_stance_m} surfer?",
            "I surf {mod_stance_m}. If the wave peels to the left, is that my forehand or my backhand?",
            "Quick one: {mod_stance_m} rider on a left-breaking wave, frontside or backside?",
        ),
    ),
    F(
        "wax_board_m",
        "surfing",
        (
            "What's the best way to {act_wax_m} a surfboard?",
            "How should I {act_wax_m} my shortboard properly?",
            "Is there a right technique to {act_wax_m} a board, or do people just wing it?",
        ),
    ),
    F(
        "wetsuit_temp_m",
        "surfing",
        (
            "What wetsuit thickness should I wear in {temp_m} water?",
            "The sea is sitting around {temp_m} this week. How thick does my suit need to be?",
            "Sea temp {temp_m}: which wetsuit do I pack?",
        ),
    ),
    F(
        "board_size_m",
        "surfing",
        (
            "What board length and volume suit {surfer_m} weighing 75 kg?",
            "I'm buying a board for {surfer_m} at about 75 kilos. What dimensions should we look for?",
            "Surfboard sizing for {surfer_m}, 75 kg: how long and how many litres?",
        ),
    ),
    # ---------------- calligraphy ----------------
    F(
        "paper_bleed_m",
        "calligraphy",
        (
            "Which papers [bleed|don't bleed] with {ink_m}?",
            "What paper stocks [feather|keep crisp lines] when I write with {ink_m}?",
            "Using {ink_m} for lettering. Which papers [make the strokes spread|hold a clean edge]?",
        ),
    ),
    F(
        "nib_script_m",
        "calligraphy",
        (
            "Which nibs [are|aren't] suited to {script_m}?",
            "What pen nibs [work well|won't work] for writing {script_m}?",
            "Picking nibs for {script_m} lettering: which ones [fit the hand|are the wrong choice]?",
        ),
    ),
    F(
        "stroke_pressure_m",
        "calligraphy",
        (
            "How much pressure should I put on a pointed nib for a {mod_stroke_m}?",
            "With a flexible nib, do I press hard or barely touch the paper on a {mod_stroke_m}?",
            "Getting a {mod_stroke_m} right in pointed pen: how far should the tines open?",
        ),
    ),
    F(
        "oblique_holder_m",
        "calligraphy",
        (
            "Which oblique holder should a {mod_hand_m} pointed-pen writer buy?",
            "I'm {mod_hand_m} and starting pointed pen. What kind of oblique pen holder fits me?",
            "Oblique holder shopping for a {mod_hand_m} calligrapher: what flange setup works?",
        ),
    ),
    F(
        "xheight_nib_m",
        "calligraphy",
        (
            "Writing foundational hand with a {nibw_m} broad nib, how tall should the x-height be?",
            "What x-height do I rule my guidelines at for Foundational using a {nibw_m} nib?",
            "Guideline spacing for the foundational hand, {nibw_m} edged pen?",
        ),
    ),
    F(
        "practice_plan_m",
        "calligraphy",
        (
            "What's a realistic practice plan to learn {script_m} if I can only spare {freq_m}?",
            "I have {freq_m} for calligraphy. How should I structure my {script_m} practice?",
            "Practice schedule for picking up {script_m} with {freq_m} available?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_I, **_LEXICONS_L, **_LEXICONS_M}
FAMILIES: list[F] = _FAMILIES_I + _FAMILIES_L + _FAMILIES_M
