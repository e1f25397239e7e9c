"""A fourth held-out set for the semantic verifier (written 2026-12-06, frozen since).

Why: the first three held-out sets have each decided something and been looked at since; the
verifier trained on a third round of training families (bench/contrast_more2.py, written at the
same time) needs data nobody has seen to be decided on. These 55 families were written for it,
by three people in parallel from one brief, before any model was run on them: in nine domains no
other family has (contrast_data.FRESH3_DOMAINS), with lexicons that repeat no value of any
training lexicon, the third round's included (checked). Rows: ``contrast_fresh3.jsonl`` and
``multiturn_fresh3.jsonl`` (seed 16); nothing trains or calibrates on them. Never tune on them:
measure.

Lexicon and family names end with the letter of the part they come from (``_v``, ``_w``, ``_x``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== boating, woodworking, libraries (names end with _v) =========================================

_LEXICONS_V: dict[str, Lexicon] = {
    # boating
    "hull_v": (
        "entity",
        [
            ("fiberglass", "glass-reinforced plastic"),
            ("aluminum", "aluminium"),
            ("Hypalon",),
            ("steel",),
            ("wooden", "timber"),
        ],
        False,
    ),
    "smallcraft_v": (
        "entity",
        [
            ("sailing dinghy", "small sailing dinghy"),
            ("canoe", "Canadian canoe"),
            ("sea kayak", "touring kayak"),
            ("beach catamaran", "Hobie Cat"),
        ],
        False,
    ),
    "act_launch_v": ("antonym", [("launch", "splash"), ("retrieve", "pull out")], True),
    "mod_upwind_v": ("antonym", [("upwind", "to windward"), ("downwind", "before the wind")], True),
    "knots_v": (
        "quantity",
        [
            ("8 knots", "eight knots"),
            ("15 knots", "fifteen knots"),
            ("25 knots", "twenty-five knots"),
            ("35 knots", "thirty-five knots"),
        ],
        False,
    ),
    "isle_v": (
        "entity",
        [
            ("the Bahamas",),
            ("Bermuda",),
            ("the British Virgin Islands", "the BVI"),
            ("Puerto Rico",),
            ("Key West",),
        ],
        False,
    ),
    "tide_v": (
        "time",
        [
            ("at slack water", "at slack tide"),
            ("on the ebb", "on an outgoing tide"),
            ("on the flood", "on an incoming tide"),
            ("at dead low tide", "at the bottom of the tide"),
        ],
        False,
    ),
    "boatlen_v": (
        "quantity",
        [("16-foot", "16 ft"), ("22-foot", "22 ft"), ("30-foot", "30 ft"), ("40-foot", "40 ft")],
        False,
    ),
    # woodworking
    "woodfor_v": (
        "entity",
        [
            ("smoking meat", "smoking food"),
            ("a cutting board", "a chopping board"),
            ("a guitar soundboard", "an acoustic guitar top"),
            ("outdoor decking", "a backyard deck"),
        ],
        False,
    ),
    "saw_v": (
        "entity",
        [("table saw",), ("band saw", "bandsaw"), ("miter saw", "chop saw"), ("scroll saw",)],
        False,
    ),
    "mod_grain_v": ("antonym", [("with the grain",), ("against the grain",)], True),
    "mod_green_v": (
        "antonym",
        [("green wood", "freshly felled wood"), ("seasoned wood", "fully dried wood")],
        True,
    ),
    "wwaud_v": (
        "audience",
        [
            ("a ten-year-old", "a 10-year-old kid"),
            ("someone with only hand tools", "a hand-tools-only woodworker"),
            ("an apartment dweller with no shop", "a renter without a workshop"),
            ("a retiree with a two-car garage", "a retired person with a double garage"),
        ],
        False,
    ),
    "glue_v": (
        "entity",
        [
            ("Titebond III", "Titebond 3"),
            ("five-minute epoxy", "5-minute epoxy"),
            ("hot hide glue", "hot animal glue"),
            ("polyurethane glue", "PU glue"),
        ],
        False,
    ),
    "clamp_v": (
        "time",
        [
            ("after 10 minutes", "after ten minutes"),
            ("after 30 minutes", "after half an hour"),
            ("after 2 hours", "after two hours"),
            ("the next morning", "the following morning"),
        ],
        False,
    ),
    # libraries
    "card_v": (
        "tier",
        [
            ("guest card", "visitor card"),
            ("resident card", "full resident card"),
            ("children's card", "juvenile card"),
            ("e-card", "digital-only card"),
        ],
        False,
    ),
    "patron_v": (
        "audience",
        [
            ("alumni", "graduates of the university"),
            ("faculty members", "professors"),
            ("visiting scholars", "visiting researchers"),
            ("community borrowers", "local residents with a community borrower card"),
        ],
        False,
    ),
    "act_borrow_v": ("antonym", [("borrow", "take out"), ("return", "send back")], True),
    "app_v": (
        "entity",
        [("Libby", "the Libby app"), ("Hoopla", "the Hoopla app"), ("cloudLibrary",), ("Kanopy",)],
        False,
    ),
    "act_weed_v": ("antonym", [("weed", "deaccession"), ("acquire", "select")], True),
    "libsys_v": (
        "entity",
        [
            ("county library", "county library system"),
            ("university library", "campus library"),
            ("city library", "municipal library"),
            ("state library",),
            ("community college library",),
        ],
        False,
    ),
    "late_v": (
        "time",
        [
            ("a day late", "one day past the due date"),
            ("two weeks late", "14 days overdue"),
            ("three months late", "90 days overdue"),
            ("a year late", "a full year overdue"),
        ],
        False,
    ),
}

_FAMILIES_V = [
    # ---------------- boating ----------------
    F(
        "hull_cleaner_v",
        "boating",
        (
            "Which boat cleaners [are safe to use|should I never use] on my {hull_v} hull?",
            "Cleaning my {hull_v} hull this weekend: what products [won't harm it|will damage it]?",
            "List the cleaning chemicals that [are fine for|would ruin] {hull_v} boat hulls.",
        ),
    ),
    F(
        "capsize_cold_v",
        "boating",
        (
            "What [should|shouldn't] I do right after capsizing a {smallcraft_v} in cold water?",
            "Cold-water capsize in a {smallcraft_v}: what [steps should I take|mistakes should I avoid]?",
            "If my {smallcraft_v} tips over in cold water, what [is the right thing to do|must I not do]?",
        ),
    ),
    F(
        "ramp_solo_v",
        "boating",
        (
            "How do I {act_launch_v} my boat at a busy ramp when I'm on my own?",
            "Solo boater here, best technique to {act_launch_v} a trailered boat at a crowded ramp?",
            "Crowded boat ramp, no helper: walk me through how to {act_launch_v} the boat without holding up the line.",
        ),
    ),
    F(
        "sail_trim_v",
        "boating",
        (
            "How should I trim the sails going {mod_upwind_v} in {knots_v} of wind?",
            "Sail trim question: {knots_v} of breeze and I'm heading {mod_upwind_v}. What settings?",
            "In {knots_v} of true wind, what's the right way to set up the main and jib when sailing {mod_upwind_v}?",
        ),
    ),
    F(
        "clear_customs_v",
        "boating",
        (
            "What customs and immigration steps do I need to take when sailing my boat from {isle_v} to {isle_v2}?",
            "Cruising from {isle_v} over to {isle_v2} on our yacht, how do we handle clearance?",
            "Paperwork checklist for taking a private boat from {isle_v} into {isle_v2}?",
        ),
    ),
    F(
        "inlet_tide_v",
        "boating",
        (
            "Is it safe to run a shallow inlet {tide_v} in a {boatlen_v} boat?",
            "Taking my {boatlen_v} boat out through a shallow inlet {tide_v}: good idea or asking for trouble?",
            "How risky is crossing a shoaling inlet {tide_v} with a {boatlen_v} boat?",
        ),
    ),
    # ---------------- woodworking ----------------
    F(
        "wood_choice_v",
        "woodworking",
        (
            "Which woods [are good|are a poor choice] for {woodfor_v}?",
            "Picking wood for {woodfor_v}, which species [work well|should I avoid]?",
            "Wood species [recommended|not recommended] for {woodfor_v}?",
            "Tell me what kinds of wood [to use|never to use] for {woodfor_v}.",
        ),
    ),
    F(
        "saw_cuts_v",
        "woodworking",
        (
            "Which cuts [can|can't] I safely make on a {saw_v}?",
            "{saw_v} safety: what cuts [are okay|are off-limits] on it?",
            "Tell me which operations a {saw_v} [handles safely|is dangerous for].",
        ),
    ),
    F(
        "plane_tearout_v",
        "woodworking",
        (
            "How do I stop tear-out when planing {mod_grain_v} on figured maple?",
            "My hand plane keeps ripping up curly maple when I go {mod_grain_v}. Fixes?",
            "Tips to get a clean surface planing figured maple {mod_grain_v}?",
        ),
    ),
    F(
        "bowl_turning_v",
        "woodworking",
        (
            "Tips for turning a bowl on the lathe from {mod_green_v}?",
            "What should I know before I turn a bowl out of {mod_green_v}?",
            "Bowl turning with {mod_green_v}: how do I avoid cracks and warping?",
        ),
    ),
    F(
        "first_projects_v",
        "woodworking",
        (
            "What are good first woodworking projects for {wwaud_v}?",
            "Suggest some starter woodworking builds suited to {wwaud_v}.",
            "Woodworking for the first time: what would you recommend building for {wwaud_v}?",
        ),
    ),
    F(
        "unclamp_glue_v",
        "woodworking",
        (
            "Can I take the clamps off a {glue_v} joint {clamp_v}?",
            "Glued up a panel with {glue_v}; is it okay to unclamp {clamp_v}?",
            "Glue-up done with {glue_v}: safe to remove the clamps {clamp_v}, or should I wait longer?",
        ),
    ),
    # ---------------- libraries ----------------
    F(
        "card_items_v",
        "libraries",
        (
            "Which items [can|can't] I borrow with a library {card_v}?",
            "What [am I allowed|am I not allowed] to check out on my {card_v}?",
            "Library {card_v} holder here: which materials [can I take home|am I blocked from borrowing]?",
        ),
    ),
    F(
        "remote_db_v",
        "libraries",
        (
            "Which of the university library's online databases [can|can't] {patron_v} use from off campus?",
            "Off-campus database access for {patron_v}: which resources [are included|are excluded]?",
            "Tell me what e-resources {patron_v} [get|don't get] remote access to through the campus library.",
        ),
    ),
    F(
        "app_borrow_v",
        "libraries",
        (
            "How do I {act_borrow_v} titles on {app_v}?",
            "Steps to {act_borrow_v} a title through {app_v} with my library card?",
            "{app_v}: where's the option to {act_borrow_v} something? Can't find it.",
            "Walk me through how you {act_borrow_v} stuff in {app_v}.",
        ),
    ),
    F(
        "collection_criteria_v",
        "libraries",
        (
            "What criteria do public librarians use to {act_weed_v} books?",
            "How does a library decide which books to {act_weed_v}?",
            "Collection development: guidelines for deciding when to {act_weed_v} a title?",
        ),
    ),
    F(
        "return_elsewhere_v",
        "libraries",
        (
            "I borrowed a book from the {libsys_v}; can I drop it off at the {libsys_v2}?",
            "Is it okay to return a {libsys_v} book to the {libsys_v2}?",
            "Returning a book at the {libsys_v2} even though it came from the {libsys_v}, is that allowed?",
        ),
    ),
    F(
        "overdue_result_v",
        "libraries",
        (
            "What happens if I return a library book {late_v}?",
            "My library book is going back {late_v}. Am I looking at fines or worse?",
            "Consequences of bringing back a borrowed book {late_v}?",
        ),
    ),
]


# ==== recycling, weddings, cycling (names end with _w) ============================================

_LEXICONS_W: dict[str, Lexicon] = {
    # recycling
    "material_w": (
        "entity",
        [
            ("plastic containers",),
            ("paper products",),
            ("metal items", "metal objects"),
            ("glass items",),
        ],
        False,
    ),
    "mod_grease_w": ("antonym", [("greasy", "grease-stained"), ("clean", "grease-free")], True),
    "deposit_state_w": (
        "entity",
        [("Vermont",), ("Hawaii",), ("Connecticut",), ("Maine",), ("Massachusetts",)],
        False,
    ),
    "waste_item_w": (
        "entity",
        [
            ("plastic bottle", "PET bottle"),
            ("aluminum can", "aluminium can"),
            ("glass jar",),
            ("disposable diaper", "disposable nappy"),
        ],
        False,
    ),
    "act_pickup_w": ("antonym", [("schedule", "arrange"), ("call off",)], True),
    "recyc_aud_w": (
        "audience",
        [
            ("restaurants",),
            ("apartment complexes", "apartment buildings"),
            ("elementary schools", "primary schools"),
            ("construction sites",),
        ],
        False,
    ),
    # weddings
    "venue_w": (
        "entity",
        [
            ("barn", "rustic barn"),
            ("beach",),
            ("vineyard", "winery"),
            ("country club",),
            ("castle",),
        ],
        False,
    ),
    "wed_role_w": (
        "entity",
        [("bride",), ("groom",), ("best man",), ("maid of honor",), ("mother of the bride",)],
        False,
    ),
    "act_rsvp_w": ("antonym", [("say yes to", "RSVP yes to"), ("say no to", "RSVP no to")], True),
    "plan_time_w": (
        "time",
        [
            ("a year before", "twelve months before"),
            ("six months before", "half a year before"),
            ("a month before", "four weeks before"),
            ("the week before",),
        ],
        False,
    ),
    "guests_w": (
        "quantity",
        [
            ("45", "forty-five"),
            ("75", "seventy-five"),
            ("120", "a hundred and twenty"),
            ("250", "two hundred fifty"),
        ],
        False,
    ),
    "wed_event_w": (
        "entity",
        [
            ("bridal shower",),
            ("rehearsal dinner",),
            ("bachelorette party", "hen party"),
            ("bachelor party", "stag do"),
        ],
        False,
    ),
    # cycling
    "act_chain_w": ("antonym", [("add links to",), ("remove links from",)], True),
    "mod_grade_w": (
        "antonym",
        [("up steep hills", "up steep climbs"), ("down steep hills", "down steep descents")],
        True,
    ),
    "ebike_tier_w": ("tier", [("Class 1",), ("Class 2",), ("Class 3",)], False),
    "ride_dist_w": (
        "quantity",
        [
            ("5-mile", "five-mile"),
            ("20-mile", "twenty-mile"),
            ("50-mile", "fifty-mile"),
            ("100-mile", "century"),
        ],
        False,
    ),
    "cyc_aud_w": (
        "audience",
        [("riders over 65",), ("junior racers",), ("complete beginners",), ("triathletes",)],
        False,
    ),
    "ride_time_w": (
        "time",
        [
            ("the night before", "the evening before"),
            ("during",),
            ("right after", "straight after"),
        ],
        False,
    ),
}

_FAMILIES_W = [
    # recycling
    F(
        "curbside_material_w",
        "recycling",
        (
            "Which {material_w} [can|can't] go in the curbside recycling bin?",
            "Curbside pickup: what {material_w} [are|aren't] accepted in the recycling cart?",
            "Tell me which {material_w} [belong|don't belong] in my household recycling collection.",
        ),
    ),
    F(
        "pizza_box_w",
        "recycling",
        (
            "Can I put {mod_grease_w} pizza boxes in the recycling?",
            "Are {mod_grease_w} pizza boxes recyclable, or do they go in the trash?",
            "{mod_grease_w} pizza box: recycle bin or garbage?",
        ),
    ),
    F(
        "bottle_deposit_w",
        "recycling",
        (
            "How do I get my bottle deposit refund in {deposit_state_w}?",
            "Returning empty cans and bottles for the deposit in {deposit_state_w} - how does that work?",
            "What's the process for cashing in container deposits in {deposit_state_w}?",
        ),
    ),
    F(
        "landfill_decay_w",
        "recycling",
        (
            "How long does it take one {waste_item_w} to decompose in a landfill?",
            "Landfill breakdown time for a single {waste_item_w}?",
            "If I throw away just one {waste_item_w}, how many years until it breaks down at the dump?",
        ),
    ),
    F(
        "appliance_pickup_w",
        "recycling",
        (
            "How do I {act_pickup_w} an appliance recycling pickup?",
            "Steps to {act_pickup_w} a collection appointment for hauling off old appliances to be recycled?",
            "Appliance recycling: how can I {act_pickup_w} the pickup?",
        ),
    ),
    F(
        "recycling_program_w",
        "recycling",
        (
            "How do I set up a recycling program for {recyc_aud_w}?",
            "Starting recycling at {recyc_aud_w}: where should I begin?",
            "What's the best way to launch a recycling scheme aimed at {recyc_aud_w}?",
        ),
    ),
    # weddings
    F(
        "venue_package_w",
        "weddings",
        (
            "What's typically [included|not included] in a {venue_w} wedding package?",
            "{venue_w} weddings: what [comes|doesn't come] with the standard venue package?",
            "When you book a {venue_w} wedding venue, which things [are|aren't] usually part of the deal?",
        ),
    ),
    F(
        "party_gift_w",
        "weddings",
        (
            "What's a good gift for the {wed_role_w} to give the {wed_role_w2} on the wedding day?",
            "Gift ideas from the {wed_role_w} to the {wed_role_w2} for the big day?",
            "On the morning of the wedding, what should the {wed_role_w} present to the {wed_role_w2}?",
        ),
    ),
    F(
        "rsvp_reply_w",
        "weddings",
        (
            "How do I politely {act_rsvp_w} a wedding invitation?",
            "What's a gracious way to {act_rsvp_w} an invite to someone's wedding?",
            "Wording help: I need to {act_rsvp_w} a wedding invite, what should I write?",
        ),
    ),
    F(
        "planning_timeline_w",
        "weddings",
        (
            "What wedding planning tasks should I take care of {plan_time_w} the big day?",
            "Checklist of things that need doing {plan_time_w} the wedding?",
            "{plan_time_w} my wedding, what should be on my to-do list?",
        ),
    ),
    F(
        "wine_amount_w",
        "weddings",
        (
            "How many bottles of wine should I buy for a wedding with {guests_w} guests?",
            "We're expecting {guests_w} guests at the reception, how much wine do we need?",
            "Estimate the number of wine bottles for {guests_w} wedding guests.",
        ),
    ),
    F(
        "shower_gift_w",
        "weddings",
        (
            "Is it rude to [bring|not bring] a gift to a {wed_event_w}?",
            "Would showing up to a {wed_event_w} [with|without] a present be considered bad etiquette?",
            "{wed_event_w} etiquette: is arriving [with|without] a gift impolite?",
        ),
    ),
    # cycling
    F(
        "chain_length_w",
        "cycling",
        (
            "How do I {act_chain_w} a bike chain?",
            "What's the right way to {act_chain_w} my bicycle chain?",
            "Bicycle chain: how can I {act_chain_w} it at home?",
        ),
    ),
    F(
        "gear_choice_w",
        "cycling",
        (
            "What gear should I be in when cycling {mod_grade_w}?",
            "Riding {mod_grade_w} on a bike: easy gear or hard gear?",
            "Which gear ratio works best when I'm pedaling {mod_grade_w}?",
        ),
    ),
    F(
        "ebike_access_w",
        "cycling",
        (
            "In the US, where [are|aren't] {ebike_tier_w} e-bikes allowed to ride?",
            "{ebike_tier_w} electric bikes in the US: which trails and paths [can|can't] they legally use?",
            "Which American roads and bike paths [permit|prohibit] {ebike_tier_w} e-bikes?",
        ),
    ),
    F(
        "ride_calories_w",
        "cycling",
        (
            "How many calories does a {ride_dist_w} bike ride burn?",
            "Roughly how much energy will I burn on a {ride_dist_w} ride?",
            "Calorie count for finishing a {ride_dist_w} ride on my bicycle?",
        ),
    ),
    F(
        "training_plan_w",
        "cycling",
        (
            "What's a good weekly cycling training plan for {cyc_aud_w}?",
            "Build me a bike training schedule suited to {cyc_aud_w}.",
            "Cycling workouts for {cyc_aud_w}: how should a typical week look?",
        ),
    ),
    F(
        "ride_fueling_w",
        "cycling",
        (
            "What foods [should|shouldn't] I eat {ride_time_w} a long bike ride?",
            "Nutrition question: which foods are [a smart choice|a bad idea] {ride_time_w} a long ride?",
            "{ride_time_w} a long cycling ride, what [is good|is best avoided] to eat?",
        ),
    ),
]


# ==== aquariums, board games, knitting (names end with _x) ========================================

_LEXICONS_X: dict[str, Lexicon] = {
    # aquariums
    "fish_x": (
        "entity",
        [
            ("bettas", "betta fish"),
            ("neon tetras",),
            ("angelfish", "freshwater angelfish"),
            ("cherry barbs",),
            ("dwarf gouramis",),
            ("oscars",),
        ],
        False,
    ),
    "act_harden_x": (
        "antonym",
        [("harden", "raise the hardness of"), ("soften", "lower the hardness of")],
        True,
    ),
    "school_x": (
        "entity",
        [
            ("harlequin rasboras",),
            ("zebra danios",),
            ("ember tetras",),
            ("corydoras", "cory catfish"),
        ],
        False,
    ),
    "tank_x": (
        "quantity",
        [
            ("10-gallon", "10 gallon"),
            ("20-gallon", "20 gallon"),
            ("40-gallon", "40 gallon"),
            ("75-gallon", "75 gallon"),
        ],
        False,
    ),
    "trip_x": (
        "time",
        [
            ("a long weekend", "three days"),
            ("one week", "7 days"),
            ("two weeks", "a fortnight"),
            ("a whole month", "30 days"),
        ],
        False,
    ),
    "disease_x": (
        "entity",
        [
            ("ich", "white spot disease"),
            ("fin rot",),
            ("velvet", "velvet disease"),
            ("dropsy",),
            ("columnaris", "cotton wool disease"),
        ],
        False,
    ),
    "herbivore_x": (
        "entity",
        [("silver dollars",), ("goldfish",), ("crayfish", "crawfish"), ("mbuna", "mbuna cichlids")],
        False,
    ),
    # boardgames
    "mod_coop_x": ("antonym", [("cooperative", "co-op"), ("competitive",)], True),
    "players_x": (
        "quantity",
        [
            ("2 players", "two people"),
            ("4 players", "a group of four"),
            ("6 players", "six people"),
            ("8 players", "eight people"),
        ],
        False,
    ),
    "game_x": (
        "entity",
        [
            ("Catan", "Settlers of Catan"),
            ("Ticket to Ride",),
            ("Carcassonne",),
            ("Pandemic",),
            ("Azul",),
            ("Wingspan",),
        ],
        False,
    ),
    "piece_x": ("entity", [("bishop",), ("knight",), ("rook",)], False),
    "phase_x": (
        "time",
        [("opening", "early game"), ("middlegame",), ("endgame", "late game")],
        False,
    ),
    "gamer_x": (
        "audience",
        [
            ("preschool-age kids", "kids aged 3 to 5"),
            ("13-year-olds", "thirteen-year-olds"),
            ("experienced hobby gamers", "seasoned board gamers"),
            ("people who have never tried modern board games", "complete non-gamers"),
        ],
        False,
    ),
    "mod_color_x": (
        "antonym",
        [("White", "the white pieces"), ("Black", "the black pieces")],
        True,
    ),
    # knitting
    "mod_edge_x": (
        "antonym",
        [("cast-on method", "cast-on technique"), ("bind-off method", "bind-off technique")],
        True,
    ),
    "fiber_x": (
        "entity",
        [("superwash merino",), ("alpaca",), ("angora",), ("bamboo viscose",)],
        False,
    ),
    "wearer_x": (
        "audience",
        [("a newborn", "a newborn baby"), ("a toddler",), ("an adult woman",), ("an adult man",)],
        False,
    ),
    "gauge_x": (
        "quantity",
        [
            ("3 stitches per inch", "3 sts/inch"),
            ("5 stitches per inch", "5 sts/inch"),
            ("7 stitches per inch", "7 sts/inch"),
        ],
        False,
    ),
    "item_x": (
        "entity",
        [("baby blankets",), ("dishcloths",), ("hand-knit socks",), ("felted slippers",)],
        False,
    ),
    "weight_x": (
        "tier",
        [
            ("fingering weight", "fingering-weight"),
            ("DK weight", "DK-weight"),
            ("worsted weight", "worsted-weight"),
            ("super bulky", "super chunky"),
        ],
        False,
    ),
    "mod_slip_x": ("antonym", [("knitwise", "as if to knit"), ("purlwise", "as if to purl")], True),
    "skill_x": (
        "audience",
        [
            ("a complete newbie", "someone who just learned to knit"),
            ("an intermediate knitter",),
            ("a very experienced knitter",),
        ],
        False,
    ),
}

_FAMILIES_X = [
    # aquariums
    F(
        "tankmates_x",
        "aquariums",
        (
            "Which fish [make good|are bad] tank mates for {fish_x}?",
            "I'm setting up a community tank around {fish_x}. What species [can safely share|should never share] the tank with them?",
            "{fish_x} tank mates: which species [are fine to add|should I avoid]?",
        ),
    ),
    F(
        "water_hardness_x",
        "aquariums",
        (
            "How can I {act_harden_x} my aquarium water naturally?",
            "What's a natural way to {act_harden_x} the water in a fish tank?",
            "Fish tank question: best chemical-free method to {act_harden_x} the water?",
        ),
    ),
    F(
        "stocking_x",
        "aquariums",
        (
            "How many {school_x} can I keep in a {tank_x} tank?",
            "What's the max number of {school_x} for a {tank_x} aquarium without overstocking it?",
            "Stocking a {tank_x} tank with {school_x} — how many is too many?",
        ),
    ),
    F(
        "vacation_feeding_x",
        "aquariums",
        (
            "How should I feed my aquarium fish while I'm on vacation for {trip_x}?",
            "Going away for {trip_x}. What do I do about feeding the fish?",
            "Fish feeding plan while I'm out of town for {trip_x}?",
        ),
    ),
    F(
        "shrimp_safe_meds_x",
        "aquariums",
        (
            "Which {disease_x} treatments [are|aren't] safe to use in a tank with shrimp?",
            "I have shrimp in my aquarium and need to treat {disease_x}. What medications [can I use safely|would harm them]?",
            "{disease_x} meds: which ones [are shrimp-safe|will hurt my shrimp]?",
        ),
    ),
    F(
        "plant_eaters_x",
        "aquariums",
        (
            "Which aquarium plants [will|won't] get eaten by {herbivore_x}?",
            "I keep {herbivore_x}. What plants [are they likely to munch on|do they usually leave alone]?",
            "Planted tank with {herbivore_x}: which species [end up as snacks|survive uneaten]?",
        ),
    ),
    # boardgames
    F(
        "coop_pick_x",
        "boardgames",
        (
            "Can you recommend a {mod_coop_x} board game for {players_x}?",
            "Looking for a good {mod_coop_x} tabletop game that works with {players_x}. Suggestions?",
            "Best {mod_coop_x} board games for {players_x}?",
        ),
    ),
    F(
        "game_end_x",
        "boardgames",
        (
            "How does a game of {game_x} end, and how is the winner decided?",
            "In {game_x}, what triggers the end of the game and who wins?",
            "{game_x} rules question: end condition + how you determine the winner?",
        ),
    ),
    F(
        "chess_trade_x",
        "boardgames",
        (
            "Is it a good idea to trade my {piece_x} for my opponent's {piece_x2} in the {phase_x}?",
            "Chess: should I swap off my {piece_x} for their {piece_x2} during the {phase_x}?",
            "Giving up a {piece_x} to take the other side's {piece_x2} in the {phase_x} — worth it or not?",
        ),
    ),
    F(
        "game_gift_x",
        "boardgames",
        (
            "What's a good board game to buy as a gift for {gamer_x}?",
            "Gift idea: which tabletop game would {gamer_x} enjoy?",
            "I want to give a board game to {gamer_x}. What would you recommend?",
        ),
    ),
    F(
        "player_count_x",
        "boardgames",
        (
            "Which popular board games [support|don't support] {players_x}?",
            "Game night with {players_x} — what well-known board games [can|can't] handle that many?",
            "Popular tabletop titles that [work|don't work] with {players_x}?",
        ),
    ),
    F(
        "chess_opening_x",
        "boardgames",
        (
            "What's a solid, beginner-friendly chess opening to play with {mod_color_x}?",
            "New to chess — which opening should I learn first with {mod_color_x}?",
            "Suggest an easy first opening for a novice playing {mod_color_x}.",
        ),
    ),
    # knitting
    F(
        "stretchy_edge_x",
        "knitting",
        (
            "What's the stretchiest {mod_edge_x} for a ribbed sock cuff?",
            "I need a really elastic {mod_edge_x} for my ribbed sock cuffs. Which one should I use?",
            "Stretchy {mod_edge_x} so my ribbed sock cuffs aren't too tight?",
        ),
    ),
    F(
        "fiber_wash_x",
        "knitting",
        (
            "How should I wash a hand-knit sweater made of {fiber_x}?",
            "What's the right way to clean my hand-knit {fiber_x} sweater without ruining it?",
            "Laundering a handknit {fiber_x} sweater: machine or hand wash, and what temperature?",
        ),
    ),
    F(
        "hat_cast_on_x",
        "knitting",
        (
            "How many stitches should I cast on for a hat for {wearer_x} at {gauge_x}?",
            "My gauge is {gauge_x}. What cast-on number do I need to make a hat that fits {wearer_x}?",
            "Hat for {wearer_x}, gauge {gauge_x}: how many stitches to cast on?",
        ),
    ),
    F(
        "fiber_choice_x",
        "knitting",
        (
            "Which yarn fibers [are|aren't] a good choice for {item_x}?",
            "Picking yarn for {item_x} — what materials [work well|should I avoid]?",
            "{item_x}: which fibers [are suitable|are a bad idea]?",
        ),
    ),
    F(
        "needle_size_x",
        "knitting",
        (
            "What needle size should I use with {weight_x} yarn?",
            "I bought some {weight_x} yarn. Which needles do I pair it with?",
            "Recommended needle size for {weight_x} yarn?",
        ),
    ),
    F(
        "slip_stitch_x",
        "knitting",
        (
            "How do I slip a stitch {mod_slip_x}?",
            "My pattern tells me to sl1 {mod_slip_x} — what does that mean in practice?",
            "Slipping stitches {mod_slip_x}: which way does the right needle go in?",
        ),
    ),
    F(
        "skill_projects_x",
        "knitting",
        (
            "Which knitting projects [are|aren't] realistic for {skill_x}?",
            "As {skill_x}, what kinds of things [should I try knitting|should I hold off on knitting]?",
            "Knitting ideas that [suit|are too ambitious for] {skill_x}?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_V, **_LEXICONS_W, **_LEXICONS_X}
FAMILIES: list[F] = _FAMILIES_V + _FAMILIES_W + _FAMILIES_X
