"""A third held-out set for the semantic verifier (written 2026-12-06, frozen since).

Why: bench/contrast_fresh.py's set decided one model and was then looked at; the next decision
(a verifier with four trained layers, at an operating point chosen from the sets already seen)
needs data nobody had seen again. These 55 families were written for it, by three people in
parallel from the brief of the first fresh set, before any model was run on them: in nine domains
no other family has (contrast_data.FRESH2_DOMAINS), with lexicons that repeat no word of the
training lexicons (checked; a few words also appear in the first fresh set's, which is held out
too). Rows: ``contrast_fresh2.jsonl`` and ``multiturn_fresh2.jsonl`` (seed 15); nothing trains
or calibrates on them. Never tune on them: measure.

Lexicon and family names end with the letter of the part they come from (``_s``, ``_t``, ``_u``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== farming, beauty, accessories (names end with _s) ================================

_LEXICONS_S: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_load_s": ("antonym", [("load",), ("unload",)], True),
    "act_curl_s": ("antonym", [("curl",), ("straighten",)], True),
    "act_lash_s": ("antonym", [("apply", "stick on"), ("take off", "pull off")], True),
    "act_size_s": ("antonym", [("size up", "enlarge"), ("size down", "downsize")], True),
    "act_strap_s": ("antonym", [("lengthen",), ("shorten",)], True),
    # ---- antonymous modifiers
    "mod_bird_s": ("antonym", [("laying hens", "layers"), ("broilers", "meat chickens")], True),
    "mod_wheat_s": (
        "antonym",
        [("winter wheat", "fall wheat"), ("spring wheat",)],
        True,
    ),
    "mod_finish_s": ("antonym", [("matte", "shine-free"), ("dewy", "glowy")], True),
    "mod_leather_s": (
        "antonym",
        [("genuine leather", "real leather"), ("faux leather", "vegan leather")],
        True,
    ),
    # ---- entities
    "livestock_s": (
        "entity",
        [("sheep",), ("goats",), ("cattle", "cows"), ("pigs", "hogs"), ("alpacas",), ("horses",)],
        False,
    ),
    "state_s": (
        "entity",
        [
            ("Iowa",),
            ("Kansas",),
            ("Nebraska",),
            ("Montana",),
            ("North Dakota",),
            ("Saskatchewan",),
        ],
        False,
    ),
    "hairtype_s": (
        "entity",
        [("fine hair",), ("wavy hair",), ("coarse hair",), ("frizzy hair",), ("layered hair",)],
        False,
    ),
    "skin_s": (
        "entity",
        [
            ("oily skin", "greasy skin"),
            ("combination skin",),
            ("mature skin", "ageing skin"),
            ("acne-prone skin", "breakout-prone skin"),
            ("rosacea",),
        ],
        False,
    ),
    "active_s": (
        "entity",
        [
            ("retinol",),
            ("vitamin C", "ascorbic acid"),
            ("niacinamide",),
            ("salicylic acid", "BHA"),
            ("benzoyl peroxide",),
            ("glycolic acid",),
        ],
        False,
    ),
    "metal_s": (
        "entity",
        [
            ("titanium",),
            ("tungsten", "tungsten carbide"),
            ("rose gold",),
            ("palladium",),
            ("sterling silver",),
        ],
        False,
    ),
    "nation_s": (
        "entity",
        [
            ("Switzerland",),
            ("Singapore",),
            ("South Korea",),
            ("Thailand",),
            ("the UAE", "the United Arab Emirates"),
            ("Turkey", "Türkiye"),
        ],
        False,
    ),
    # ---- audiences
    "aud_skin_s": (
        "audience",
        [
            ("people in their twenties", "twentysomethings"),
            ("people in their forties", "fortysomethings"),
            ("people over sixty", "the over-sixties"),
            ("tweens", "preteens"),
            ("new mothers", "postpartum women"),
        ],
        False,
    ),
    "aud_pack_s": (
        "audience",
        [
            ("preschoolers", "kids in preschool"),
            ("kindergartners", "kindergarten kids"),
            ("middle schoolers", "middle school students"),
            ("high schoolers", "high school students"),
            ("elementary schoolers", "grade-schoolers"),
        ],
        False,
    ),
    # ---- time windows
    "lact_s": (
        "time",
        [
            ("in early lactation", "in the first weeks after calving"),
            ("at peak lactation", "when her milk yield peaks"),
            ("in late lactation", "toward the end of lactation"),
            ("during the dry period", "while she's dried off"),
        ],
        False,
    ),
    "dur_s": (
        "time",
        [
            ("for 20 minutes", "for twenty minutes"),
            ("for 45 minutes", "for three quarters of an hour"),
            ("for 90 minutes", "for an hour and a half"),
            ("for three hours", "for 3 hours"),
            ("all night", "while I sleep"),
        ],
        False,
    ),
    # ---- product tier
    "fr_s": (
        "tier",
        [("Forerunner 55",), ("Forerunner 165",), ("Forerunner 265",), ("Forerunner 965",)],
        False,
    ),
    # ---- quantity
    "flock_s": (
        "quantity",
        [
            ("8", "eight"),
            ("15", "fifteen"),
            ("25", "twenty-five"),
            ("40", "forty"),
            ("200", "two hundred"),
        ],
        False,
    ),
}

_FAMILIES_S = [
    # ---- farming
    F(
        "load_trailer_s",
        "farming",
        (
            "How do I {act_load_s} {livestock_s} calmly when moving them by trailer?",
            "Tips to {act_load_s} a stock trailer full of {livestock_s} with minimal stress?",
            "Haulage day: how should I {act_load_s} my {livestock_s} so they stay relaxed?",
        ),
    ),
    F(
        "hen_feed_s",
        "farming",
        (
            "How much feed do {flock_s} {mod_bird_s} eat per day?",
            "What daily ration should I put out for {flock_s} {mod_bird_s}?",
            "Kilos of chicken feed a day for {flock_s} {mod_bird_s}?",
        ),
    ),
    F(
        "wheat_sow_s",
        "farming",
        (
            "When should I sow {mod_wheat_s} in {state_s}?",
            "What's the ideal planting window for {mod_wheat_s} around {state_s}?",
            "{state_s} growers: best date to drill {mod_wheat_s}?",
        ),
    ),
    F(
        "cow_ration_s",
        "farming",
        (
            "How much grain should a dairy cow get {lact_s}?",
            "What's the right concentrate ration for a Holstein {lact_s}?",
            "Feeding a dairy cow {lact_s}: how many kg of concentrates a day?",
        ),
    ),
    F(
        "haul_cattle_s",
        "farming",
        (
            "What paperwork do I need to haul cattle from {state_s} to {state_s2}?",
            "Which health certificates are required to truck cattle from {state_s} "
            "into {state_s2}?",
            "Moving a cattle herd from {state_s} to {state_s2}: "
            "what documents does the vet have to sign?",
        ),
    ),
    F(
        "toxic_pasture_s",
        "farming",
        (
            "Which pasture plants [are|aren't] poisonous to {livestock_s}?",
            "What plants growing in grazing land [are|are not] toxic for {livestock_s}?",
            "Grazing {livestock_s}: which field plants [should they avoid|are harmless to them]?",
        ),
    ),
    # ---- beauty
    F(
        "heatless_curl_s",
        "beauty",
        (
            "How can I {act_curl_s} my {hairtype_s} without using heat?",
            "Is there a heatless way to {act_curl_s} {hairtype_s}?",
            "{act_curl_s} {hairtype_s} with no hot tools: any methods?",
        ),
    ),
    F(
        "false_lash_s",
        "beauty",
        (
            "How do I {act_lash_s} false eyelashes without hurting my natural ones?",
            "What's the gentlest way to {act_lash_s} strip lashes so my real lashes survive?",
            "Best method to {act_lash_s} fake lashes without damaging my own?",
        ),
    ),
    F(
        "foundation_s",
        "beauty",
        (
            "What's a good {mod_finish_s} foundation for {skin_s}?",
            "Which {mod_finish_s} base makeup would you recommend if I have {skin_s}?",
            "{skin_s}: best {mod_finish_s} foundation to buy?",
        ),
    ),
    F(
        "skincare_age_s",
        "beauty",
        (
            "What does a simple skincare routine for {aud_skin_s} look like?",
            "Which daily skin care steps do {aud_skin_s} actually need?",
            "Basic face-care regimen for {aud_skin_s}: what should it include?",
        ),
    ),
    F(
        "dye_time_s",
        "beauty",
        (
            "Is it okay to leave box hair dye on {dur_s}?",
            "Can I keep drugstore hair color on my head {dur_s} without damaging it?",
            "At-home hair colour left in {dur_s}: is that fine?",
        ),
    ),
    F(
        "actives_s",
        "beauty",
        (
            "Which skincare products [can|can't] I use together with {active_s}?",
            "What [is|isn't] safe to layer with {active_s} in my routine?",
            "{active_s}: which other ingredients [pair well|shouldn't be combined] with it?",
        ),
    ),
    # ---- accessories
    F(
        "ring_resize_s",
        "accessories",
        (
            "How much does it cost to {act_size_s} a {metal_s} ring?",
            "What will a jeweler charge to {act_size_s} my {metal_s} ring?",
            "Price to {act_size_s} a {metal_s} ring at a jewellery shop?",
        ),
    ),
    F(
        "strap_length_s",
        "accessories",
        (
            "How do I {act_strap_s} a metal watch bracelet at home?",
            "Is there a way to {act_strap_s} a link-style watch band myself?",
            "{act_strap_s} a steel watch strap without going to a jeweller: how?",
        ),
    ),
    F(
        "bag_clean_s",
        "accessories",
        (
            "How do I clean a {mod_leather_s} handbag without ruining it?",
            "What's the right way to get dirt off a {mod_leather_s} purse?",
            "Cleaning a {mod_leather_s} bag: what should I use so it doesn't get damaged?",
        ),
    ),
    F(
        "watch_duty_s",
        "accessories",
        (
            "How much import duty is charged on a watch shipped from {nation_s} to {nation_s2}?",
            "If I have a wristwatch sent from {nation_s} to {nation_s2}, what customs fees apply?",
            "Customs charges on a watch mailed from {nation_s} to {nation_s2}?",
        ),
    ),
    F(
        "garmin_battery_s",
        "accessories",
        (
            "How long does the battery last on a Garmin {fr_s}?",
            "How many days will a Garmin {fr_s} run on a single charge?",
            "Garmin {fr_s}: battery life between charges?",
        ),
    ),
    F(
        "backpack_size_s",
        "accessories",
        (
            "What size backpack is right for {aud_pack_s}?",
            "How big a school bag should {aud_pack_s} carry?",
            "Backpack capacity for {aud_pack_s}: how many liters is right?",
        ),
    ),
]


# ==== moving, genealogy, aviation (names end with _t) =================================

_LEXICONS_T: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_assemble_t": (
        "antonym",
        [("take apart", "disassemble", "dismantle"), ("reassemble", "rebuild")],
        True,
    ),
    "act_util_t": ("antonym", [("start",), ("stop", "shut off")], True),
    "act_pack_t": ("antonym", [("pack", "box up"), ("unpack",)], True),
    "act_merge_t": ("antonym", [("merge", "combine"), ("unmerge", "separate")], True),
    "act_gear_t": ("antonym", [("deploy", "put down"), ("stow", "bring up")], True),
    # ---- antonymous modifiers
    "mod_dist_t": ("antonym", [("long-distance",), ("short-distance", "same-city")], True),
    "mod_side_t": (
        "antonym",
        [("paternal line", "father's side"), ("maternal line", "mother's side")],
        True,
    ),
    "mod_living_t": ("antonym", [("living", "still-living"), ("deceased", "dead")], True),
    "mod_wind_t": ("antonym", [("headwind",), ("tailwind",)], True),
    # ---- entities
    "cargo_t": (
        "entity",
        [
            ("houseplants", "potted plants"),
            ("propane tanks", "gas cylinders"),
            ("paint cans", "cans of paint"),
            ("firearms", "guns"),
            ("aquariums", "fish tanks"),
        ],
        False,
    ),
    "dnasite_t": (
        "entity",
        [
            ("AncestryDNA",),
            ("23andMe",),
            ("MyHeritage",),
            ("FamilyTreeDNA", "Family Tree DNA"),
            ("GEDmatch",),
            ("Living DNA",),
        ],
        False,
    ),
    "treesite_t": ("entity", [("FamilySearch",), ("WikiTree",), ("Geni",), ("MyHeritage",)], False),
    "homeland_t": (
        "entity",
        [("Sicily",), ("Bavaria",), ("Galicia",), ("Silesia",), ("Cornwall",), ("Ulster",)],
        False,
    ),
    "hub_t": (
        "entity",
        [
            ("Singapore",),
            ("Dubai",),
            ("Honolulu",),
            ("Reykjavik",),
            ("Auckland",),
            ("Johannesburg",),
        ],
        False,
    ),
    # ---- audiences
    "seeker_t": (
        "audience",
        [
            ("adoptees", "adopted people"),
            ("African Americans", "Black Americans"),
            ("people of Jewish descent", "Jewish families"),
            ("children of immigrants",),
            ("Native Americans", "Indigenous Americans"),
        ],
        False,
    ),
    "traveler_t": (
        "audience",
        [
            ("infants", "babies under two"),
            ("unaccompanied minors", "children flying alone"),
            ("passengers in wheelchairs", "travelers who use a wheelchair"),
            ("people with service dogs", "passengers with a service animal"),
        ],
        False,
    ),
    # ---- time windows
    "movetime_t": (
        "time",
        [
            ("mid-month", "in the middle of the month"),
            ("at the end of the month", "at month's end"),
            ("in December", "during December"),
            ("midweek", "on a Tuesday or Wednesday"),
            ("in late spring", "in May or June"),
        ],
        False,
    ),
    "daytime_t": (
        "time",
        [
            ("at dawn", "at first light"),
            ("in the middle of the day", "around lunchtime"),
            ("in the afternoon", "after lunch"),
            ("in the late evening", "after 9 p.m."),
        ],
        False,
    ),
    # ---- product tiers
    "cabin_t": (
        "tier",
        [("basic economy",), ("premium economy",), ("business class",), ("first class",)],
        False,
    ),
    # ---- quantities
    "rooms_t": (
        "quantity",
        [
            ("1-bedroom", "one-bedroom"),
            ("2-bedroom", "two-bedroom"),
            ("3-bedroom", "three-bedroom"),
            ("4-bedroom", "four-bedroom"),
        ],
        False,
    ),
    "cousin_t": (
        "quantity",
        [
            ("second cousin", "2nd cousin"),
            ("third cousin", "3rd cousin"),
            ("fourth cousin", "4th cousin"),
            ("fifth cousin", "5th cousin"),
        ],
        False,
    ),
}

_FAMILIES_T = [
    # ---- moving
    F(
        "wardrobe_t",
        "moving",
        (
            "What's the easiest way to {act_assemble_t} a wardrobe when moving house?",
            "Any tips to {act_assemble_t} a big closet unit during a relocation?",
            "Moving day: how should I {act_assemble_t} my bulky armoire?",
        ),
    ),
    F(
        "utilities_t",
        "moving",
        (
            "How far ahead should I {act_util_t} gas and electricity service when I move?",
            "When relocating, how many days in advance do I {act_util_t} the power and gas supply?",
            "Lead time to {act_util_t} my energy supply for a house move?",
        ),
    ),
    F(
        "kitchen_t",
        "moving",
        (
            "What's the fastest way to {act_pack_t} a kitchen when moving?",
            "Is there a quick method to {act_pack_t} all my pots, plates and glasses when I relocate?",
            "Relocating: how do I {act_pack_t} the cookware and dishes efficiently?",
        ),
    ),
    F(
        "move_cost_t",
        "moving",
        (
            "What do movers charge for a {mod_dist_t} move of a {rooms_t} apartment?",
            "Typical price to hire a removal company for a {rooms_t} flat, {mod_dist_t}?",
            "How much should I budget for professional movers, {rooms_t} home, {mod_dist_t}?",
        ),
    ),
    F(
        "move_date_t",
        "moving",
        (
            "Is it cheaper to hire movers {movetime_t}?",
            "Do moving companies charge lower rates {movetime_t}?",
            "Would booking a relocation crew {movetime_t} save me money?",
        ),
    ),
    F(
        "mover_cargo_t",
        "moving",
        (
            "[Will|Won't] professional movers put {cargo_t} on the truck?",
            "Do moving companies [|refuse to ]transport {cargo_t}?",
            "{cargo_t} in the removal van: [allowed|not allowed]?",
        ),
    ),
    # ---- genealogy
    F(
        "dna_line_t",
        "genealogy",
        (
            "Which DNA test should I take to trace my {mod_side_t}?",
            "What kind of genetic kit follows ancestry down the {mod_side_t}?",
            "Exploring my {mod_side_t} through a DNA kit: which one do I buy?",
        ),
    ),
    F(
        "dna_transfer_t",
        "genealogy",
        (
            "Can I transfer my raw DNA data from {dnasite_t} to {dnasite_t2}?",
            "Is it possible to take the results I got at {dnasite_t} and load them into"
            " {dnasite_t2}?",
            "Moving my genetic test file from {dnasite_t} over to {dnasite_t2}: supported?",
        ),
    ),
    F(
        "old_records_t",
        "genealogy",
        (
            "Which genealogy records [are|aren't] online for ancestors from {homeland_t}?",
            "What [can|can't] I find digitized about forebears who came from {homeland_t}?",
            "Family history sources for {homeland_t}: which are [|not ]searchable on the web?",
        ),
    ),
    F(
        "tree_privacy_t",
        "genealogy",
        (
            "What privacy rules apply to {mod_living_t} people in a public family tree?",
            "Are there restrictions on showing {mod_living_t} relatives in an online pedigree?",
            "{mod_living_t} family members on a shared genealogy site: what can others see?",
        ),
    ),
    F(
        "shared_cm_t",
        "genealogy",
        (
            "How much DNA do I share with a {cousin_t}?",
            "What's the typical centimorgan overlap between me and a {cousin_t}?",
            "Expected shared cM for a {cousin_t} match?",
        ),
    ),
    F(
        "profiles_t",
        "genealogy",
        (
            "How do I {act_merge_t} two person profiles on {treesite_t}?",
            "Is there a way to {act_merge_t} a pair of ancestor records in {treesite_t}?",
            "{treesite_t}: steps to {act_merge_t} two people's entries in the tree?",
        ),
    ),
    F(
        "roots_start_t",
        "genealogy",
        (
            "Where should {seeker_t} begin when building a family tree?",
            "Best first steps in ancestry research for {seeker_t}?",
            "Getting into genealogy: advice for {seeker_t} just starting out?",
        ),
    ),
    # ---- aviation
    F(
        "gear_t",
        "aviation",
        (
            "At what point should a pilot {act_gear_t} the landing gear?",
            "When is the right moment to {act_gear_t} the undercarriage on a light twin?",
            "Flying a complex aircraft: when do I {act_gear_t} the wheels?",
        ),
    ),
    F(
        "wind_t",
        "aviation",
        (
            "How does a {mod_wind_t} change takeoff distance?",
            "What effect does a {mod_wind_t} have on the ground roll at departure?",
            "A {mod_wind_t} on the runway: how much longer or shorter is the run to lift-off?",
        ),
    ),
    F(
        "jet_lag_t",
        "aviation",
        (
            "How do I beat jet lag after flying from {hub_t} to {hub_t2}?",
            "Tips to recover from the time-zone shift after a trip from {hub_t} to {hub_t2}?",
            "Just flew {hub_t} to {hub_t2} and my body clock is wrecked, what helps?",
        ),
    ),
    F(
        "special_pax_t",
        "aviation",
        (
            "What do airlines require when booking a flight for {traveler_t}?",
            "Rules and forms for {traveler_t} on commercial flights?",
            "Booking air travel for {traveler_t}: what's needed?",
        ),
    ),
    F(
        "fare_change_t",
        "aviation",
        (
            "Can I change the date on a {cabin_t} ticket for free?",
            "Are date changes without a fee allowed on {cabin_t} fares?",
            "Rebooking a {cabin_t} seat to another day: any charge?",
        ),
    ),
    F(
        "bumpy_t",
        "aviation",
        (
            "Is turbulence usually worse on flights {daytime_t}?",
            "Do planes hit more rough air {daytime_t}?",
            "Flying {daytime_t}: are bumpy rides more common?",
        ),
    ),
]


# ==== collectibles, funerals, beekeeping (names end with _u) ==========================

_LEXICONS_U: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_unite_u": ("antonym", [("combine", "unite", "merge"), ("split", "divide")], True),
    "act_narrow_u": ("antonym", [("narrow", "restrict"), ("widen", "open up")], True),
    "act_bury_u": ("antonym", [("bury", "inter"), ("cremate",)], True),
    "act_attend_u": ("antonym", [("attend", "go to"), ("skip", "miss")], True),
    "act_consign_u": ("antonym", [("consign", "auction off"), ("bid on",)], True),
    # ---- antonymous modifiers
    "mod_temper_u": (
        "antonym",
        [("calm", "gentle", "docile"), ("aggressive", "defensive", "hot-tempered")],
        True,
    ),
    "mod_set_u": ("antonym", [("creamed", "whipped", "set"), ("runny", "liquid")], True),
    "mod_casket_u": (
        "antonym",
        [("open-casket", "open-coffin"), ("closed-casket", "closed-coffin")],
        True,
    ),
    "mod_circ_u": ("antonym", [("uncirculated", "mint-state"), ("circulated", "worn")], True),
    # ---- entities
    "hive_u": (
        "entity",
        [
            ("Langstroth hive", "Langstroth box"),
            ("top-bar hive", "top bar hive"),
            ("Warré hive", "Warre hive"),
            ("Flow Hive",),
            ("skep", "straw skep"),
            ("nuc box", "nucleus box"),
        ],
        False,
    ),
    "state_u": (
        "entity",
        [("Texas",), ("Ohio",), ("Florida",), ("Oregon",), ("Arizona",), ("Michigan",)],
        False,
    ),
    "land_u": (
        "entity",
        [
            ("the Philippines",),
            ("Nigeria",),
            ("Vietnam",),
            ("Morocco",),
            ("Peru",),
            ("Colombia",),
        ],
        False,
    ),
    "auction_u": (
        "entity",
        [("Sotheby's",), ("Christie's",), ("Heritage Auctions",), ("Bonhams",), ("Phillips",)],
        False,
    ),
    "grader_u": ("entity", [("PCGS",), ("NGC",), ("ANACS",), ("ICG",)], False),
    # ---- audiences
    "baud_u": (
        "audience",
        [
            ("people allergic to bee stings", "anyone with a sting allergy"),
            ("asthmatics", "people with asthma"),
            ("apartment dwellers", "people who live in flats"),
            ("people on blood thinners", "those taking anticoagulants"),
            ("kids under ten", "children younger than ten"),
        ],
        False,
    ),
    "faud_u": (
        "audience",
        [
            ("a five-year-old", "a kindergartner"),
            ("a teenager", "a teen"),
            ("someone with dementia", "a person living with dementia"),
            ("a grieving widow", "a recently widowed spouse"),
            ("a devoutly Catholic grandparent", "a very religious Catholic grandparent"),
        ],
        False,
    ),
    # ---- time windows
    "bseason_u": (
        "time",
        [
            ("during the nectar flow", "while the nectar is flowing"),
            ("in late autumn", "in late fall"),
            ("in the middle of winter", "in midwinter"),
            ("before the first blossoms open", "ahead of the first spring blossoms"),
            ("right after the honey harvest", "straight after extracting the honey"),
        ],
        False,
    ),
    "ftime_u": (
        "time",
        [
            ("within 24 hours of the death", "within a day of the passing"),
            ("a week after the death", "seven days after the passing"),
            ("six months after the death", "half a year after the passing"),
            ("a year after the death", "on the first anniversary of the passing"),
        ],
        False,
    ),
    # ---- tiers
    "fpkg_u": (
        "tier",
        [
            ("full-service funeral package", "traditional full-service package"),
            ("graveside-only package", "graveside service package"),
            ("direct burial package", "no-ceremony burial package"),
            ("direct cremation package", "simple cremation package"),
        ],
        False,
    ),
    "gtier_u": (
        "tier",
        [
            ("Value Bulk tier", "Value Bulk service level"),
            ("Value tier", "Value service level"),
            ("Regular tier", "Regular service level"),
            ("Super Express tier", "Super Express service level"),
        ],
        False,
    ),
    # ---- quantities
    "cardqty_u": (
        "quantity",
        [
            ("a single card", "one card"),
            ("5 cards", "five cards"),
            ("20 cards", "twenty cards"),
            ("50 cards", "fifty cards"),
            ("100 cards", "a hundred cards"),
        ],
        False,
    ),
}

_FAMILIES_U = [
    # ---- beekeeping
    F(
        "syrup_feed_u",
        "beekeeping",
        (
            "Why [should|shouldn't] I feed my bees sugar syrup {bseason_u}?",
            "What's the reason [to|not to] give a hive sugar water {bseason_u}?",
            "Sugar feeding for a colony {bseason_u}: why [do it|avoid it]?",
        ),
    ),
    F(
        "colony_unite_u",
        "beekeeping",
        (
            "How do I {act_unite_u} two honeybee colonies safely?",
            "What's the proper method to {act_unite_u} a pair of hives?",
            "{act_unite_u} two beehives: what's the right procedure?",
        ),
    ),
    F(
        "inspect_temper_u",
        "beekeeping",
        (
            "How should I go about inspecting my {mod_temper_u} colony?",
            "Tips for doing a frame check on bees that are {mod_temper_u}?",
            "My bees are {mod_temper_u}: what's the best way to open and look through the hive?",
        ),
    ),
    F(
        "honey_set_u",
        "beekeeping",
        (
            "How do I make {mod_set_u} honey from my own harvest?",
            "What's the method to end up with {mod_set_u} honey from the frames I've harvested?",
            "Producing {mod_set_u} honey at home: how is it done?",
        ),
    ),
    F(
        "hive_transfer_u",
        "beekeeping",
        (
            "How do I move a colony from a {hive_u} into a {hive_u2}?",
            "What's the method for transferring bees out of a {hive_u} and into a {hive_u2}?",
            "Switching my bees from a {hive_u} over to a {hive_u2}: how?",
        ),
    ),
    F(
        "beekeep_risk_u",
        "beekeeping",
        (
            "Is keeping bees a safe hobby for {baud_u}?",
            "Can {baud_u} take up beekeeping without serious risk?",
            "Beekeeping and {baud_u}: how dangerous is it?",
        ),
    ),
    F(
        "entrance_u",
        "beekeeping",
        (
            "When should I {act_narrow_u} my hive entrance?",
            "At what point in the season do beekeepers {act_narrow_u} the colony's doorway?",
            "{act_narrow_u} the entrance on a beehive: when's the right time?",
        ),
    ),
    # ---- funerals
    F(
        "burial_cost_u",
        "funerals",
        (
            "How much does it cost to {act_bury_u} a loved one in {state_u}?",
            "What's the typical price to {act_bury_u} a family member in {state_u}?",
            "{state_u}: average total bill to {act_bury_u} someone who died?",
        ),
    ),
    F(
        "package_u",
        "funerals",
        (
            "What [is|isn't] included in a {fpkg_u}?",
            "Which services does a {fpkg_u} [cover|leave out]?",
            "{fpkg_u}: what's [part of it|excluded]?",
        ),
    ),
    F(
        "embalm_u",
        "funerals",
        (
            "Is embalming required if the service will be {mod_casket_u}?",
            "Do we have to embalm the body for a funeral that's {mod_casket_u}?",
            "{mod_casket_u} service planned: does the body need embalming?",
        ),
    ),
    F(
        "coworker_funeral_u",
        "funerals",
        (
            "Is it rude to {act_attend_u} the funeral of a coworker I barely knew?",
            "Would it be bad etiquette to {act_attend_u} a colleague's funeral when we weren't close?",
            "{act_attend_u} the service for someone from work I hardly knew: impolite?",
        ),
    ),
    F(
        "repatriate_u",
        "funerals",
        (
            "How do I repatriate a body from {land_u} to {land_u2}?",
            "What's involved in flying a deceased relative home from {land_u} to {land_u2}?",
            "Sending human remains back from {land_u} to {land_u2}: what's the process?",
        ),
    ),
    F(
        "memorial_timing_u",
        "funerals",
        (
            "Is it acceptable to hold a memorial service {ftime_u}?",
            "Would a remembrance gathering {ftime_u} be considered appropriate?",
            "Having the memorial {ftime_u}: is that seen as okay?",
        ),
    ),
    F(
        "explain_cremation_u",
        "funerals",
        (
            "How do I explain cremation to {faud_u}?",
            "What's a good way to tell {faud_u} what happens when a body is cremated?",
            "Talking about cremation with {faud_u}: what should I say?",
        ),
    ),
    # ---- collectibles
    F(
        "auction_fee_u",
        "collectibles",
        (
            "What fees will I pay to {act_consign_u} a watch at {auction_u}?",
            "How much does {auction_u} charge when you {act_consign_u} a timepiece?",
            "{auction_u} commission to {act_consign_u} a wristwatch: what's the rate?",
        ),
    ),
    F(
        "morgan_value_u",
        "collectibles",
        (
            "What are {mod_circ_u} 1921 Morgan silver dollars worth today?",
            "How much are {mod_circ_u} Morgan dollars from 1921 valued at these days?",
            "{mod_circ_u} 1921 Morgan dollar: current market value?",
        ),
    ),
    F(
        "crossover_u",
        "collectibles",
        (
            "How do I cross over a slabbed coin from {grader_u} to {grader_u2}?",
            "What's the process for getting {grader_u}-slabbed coins regraded and reholdered"
            " by {grader_u2}?",
            "{grader_u} to {grader_u2} crossover for a graded coin: how does it work?",
        ),
    ),
    F(
        "psa_fee_u",
        "collectibles",
        (
            "How much would PSA charge to grade {cardqty_u} on the {gtier_u}?",
            "What's the total fee for sending {cardqty_u} to PSA under the {gtier_u}?",
            "{cardqty_u} submitted to PSA at the {gtier_u}: what's the cost?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_S, **_LEXICONS_T, **_LEXICONS_U}
FAMILIES = _FAMILIES_S + _FAMILIES_T + _FAMILIES_U
