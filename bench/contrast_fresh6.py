"""A seventh held-out set for the semantic verifier (written 2026-12-07, frozen since).

Why: the six earlier held-out sets have each decided something and been looked at since; the
verifier trained with conversations made from the first round of written triplets
(bench/train_verifier.py ``--written-turns``) needs data nobody has seen to be decided on. These
54 families were written for it, by three people in parallel from one brief, before any model
was run on them: in nine domains no other family has (contrast_data.FRESH6_DOMAINS), with
lexicons that repeat no value of any other lexicon and name no distinctive value either round of
written triplets uses (checked). Rows: ``contrast_fresh6.jsonl`` and ``multiturn_fresh6.jsonl``
(seed 20); nothing trains or calibrates on them. Never tune on them: measure.

Lexicon and family names end with the letter of the part they come from (``_n``, ``_o``, ``_y``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== climbing, tennis, homebrewing (names end with _n) ==========================================

_LEXICONS_N: dict[str, Lexicon] = {
    # climbing
    "rock_n": ("entity", [("gritstone",), ("quartzite",), ("basalt",), ("soft sandstone",)], False),
    "injury_n": (
        "entity",
        [
            ("strained A2 pulley", "A2 pulley strain"),
            ("torn lumbrical", "lumbrical tear"),
            ("case of climber's elbow", "bout of climber's elbow"),
        ],
        False,
    ),
    "mod_angle_n": (
        "antonym",
        [("steeply overhanging", "roof-angle"), ("low-angle slab", "less-than-vertical slab")],
        True,
    ),
    "act_anchor_n": (
        "antonym",
        [("rig", "build"), ("break down", "tear down")],
        True,
    ),
    "ropeage_n": (
        "time",
        [
            ("four-year-old",),
            ("twelve-year-old", "12-year-old"),
            ("twenty-five-year-old", "25-year-old"),
        ],
        False,
    ),
    "climber_n": (
        "audience",
        [
            ("climbers in their first six months", "brand-new climbers"),
            ("boulderers projecting V9", "V9-level boulderers"),
            ("climbers still in their early teens", "young teen climbers"),
            ("climbers past sixty", "climbers over 60"),
        ],
        False,
    ),
    # tennis
    "stroke_n": (
        "entity",
        [
            ("kick serve", "topspin second serve"),
            ("one-handed backhand", "single-handed backhand"),
            ("heavy topspin forehand", "loopy topspin forehand"),
            ("backhand volley",),
        ],
        False,
    ),
    "surface_n": (
        "entity",
        [
            ("red clay", "European clay"),
            ("grass courts", "lawn courts"),
            ("indoor carpet", "carpet courts"),
            ("fast acrylic hard courts", "fast hardcourts"),
        ],
        False,
    ),
    "mod_tension_n": ("antonym", [("tighter", "tauter"), ("looser", "slacker")], True),
    "mod_partner_n": (
        "antonym",
        [
            ("up at the net", "closing in at the net"),
            ("back on the baseline", "staying back at the baseline"),
        ],
        True,
    ),
    "mod_role_n": ("antonym", [("serving",), ("returning serve", "receiving serve")], True),
    "ntrp_n": (
        "tier",
        [("NTRP 2.5", "2.5 NTRP"), ("NTRP 3.5", "3.5 NTRP"), ("NTRP 4.5", "4.5 NTRP")],
        False,
    ),
    # homebrewing
    "beerstyle_n": (
        "entity",
        [
            ("Belgian witbier", "wit"),
            ("West Coast IPA",),
            ("Czech pilsner", "Bohemian pilsner"),
            ("Irish dry stout",),
        ],
        False,
    ),
    "vessel_n": (
        "entity",
        [
            ("stainless steel kettle", "stainless brew kettle"),
            ("PET plastic fermenter", "PET fermenter"),
            ("aluminum brew pot", "aluminium brew pot"),
            ("glass carboy",),
        ],
        False,
    ),
    "mod_fermtemp_n": ("antonym", [("warmer", "hotter"), ("cooler", "colder")], True),
    "yeast_n": (
        "entity",
        [
            ("kveik Voss", "Voss kveik"),
            ("Saflager W-34/70", "W-34/70"),
            ("Belle Saison",),
            ("WLP001 California Ale", "WLP001"),
        ],
        False,
    ),
    "mod_finish_n": (
        "antonym",
        [("sweeter and fuller", "fuller and sweeter"), ("drier and crisper", "crisper and drier")],
        True,
    ),
    "batch_n": (
        "quantity",
        [
            ("1 gallon", "a single gallon"),
            ("5 gallons", "5 gal"),
            ("15 gallons", "fifteen gallons"),
        ],
        False,
    ),
    "cellar_n": (
        "time",
        [
            ("six weeks", "6 weeks"),
            ("eighteen months", "a year and a half"),
            ("eight years", "8 years"),
        ],
        False,
    ),
}

_FAMILIES_N = [
    # climbing
    F(
        "trad_pro_rock_n",
        "climbing",
        (
            "Which kinds of trad protection [hold well|tend to fail] in {rock_n}?",
            "On {rock_n}, what gear placements [can I actually trust|should I be wary of]?",
            "Placing pro in {rock_n}: which cams and nuts [are reliable|are unreliable] there?",
        ),
    ),
    F(
        "injury_rehab_n",
        "climbing",
        (
            "Which exercises [help|make things worse] when rehabbing a {injury_n}?",
            "I'm coming back from a {injury_n} - what movements [speed up recovery|set recovery back]?",
            "Rehab for a {injury_n}: which drills [are beneficial|are harmful]?",
        ),
    ),
    F(
        "footwork_angle_n",
        "climbing",
        (
            "What footwork technique works best on {mod_angle_n} routes?",
            "How should I be using my feet when I climb {mod_angle_n} terrain?",
            "Foot placement tips for {mod_angle_n} climbing, please.",
        ),
    ),
    F(
        "toprope_anchor_n",
        "climbing",
        (
            "How do I {act_anchor_n} a top-rope anchor on a pair of bolts at the cliff top?",
            "What are the steps to {act_anchor_n} a toprope setup off two bolted hangers up top?",
            "Two bolts above the crag: walk me through how to {act_anchor_n} the top-rope anchor.",
        ),
    ),
    F(
        "rope_retire_n",
        "climbing",
        (
            "Is it still okay to lead on a {ropeage_n} dynamic rope that's barely been used?",
            "I have a {ropeage_n} climbing rope, hardly any falls on it. Safe for lead climbing or should I retire it?",
            "Lightly used {ropeage_n} lead rope: keep climbing on it or bin it?",
        ),
    ),
    F(
        "hangboard_plan_n",
        "climbing",
        (
            "What's a sensible hangboard routine for {climber_n}?",
            "How should {climber_n} structure their fingerboard training?",
            "Fingerboard program for {climber_n}: sets, hang times, rest?",
        ),
    ),
    # tennis
    F(
        "grip_stroke_n",
        "tennis",
        (
            "Which grips [suit|are wrong for] a {stroke_n}?",
            "For hitting a {stroke_n}, what ways of holding the racket [work well|don't work]?",
            "{stroke_n} technique: grips I [should use|should avoid]?",
        ),
    ),
    F(
        "style_surface_n",
        "tennis",
        (
            "Which playing styles [thrive|struggle] on {surface_n}?",
            "What kind of player [does well|has a hard time] on {surface_n}?",
            "Tactics on {surface_n}: which game styles [get rewarded|get punished] there?",
        ),
    ),
    F(
        "string_tension_n",
        "tennis",
        (
            "What happens to my game if I string my racket a few pounds {mod_tension_n}?",
            "If my stringer strings the frame 3-4 lbs {mod_tension_n} than usual, how will it play differently?",
            "Restringing soon, thinking a couple pounds {mod_tension_n}: what's the effect on power, control and feel?",
        ),
    ),
    F(
        "doubles_position_n",
        "tennis",
        (
            "In doubles, where should I stand when I'm {mod_role_n} and my partner is {mod_partner_n}?",
            "Doubles positioning: I'm {mod_role_n}, partner {mod_partner_n} - where do I go?",
            "My doubles partner is {mod_partner_n} while I'm {mod_role_n}. What's my correct court position?",
        ),
    ),
    F(
        "surface_switch_n",
        "tennis",
        (
            "What adjustments should I make to my game when moving from {surface_n} to {surface_n2}?",
            "Switching from {surface_n} over to {surface_n2} this season - how do I adapt my footwork and shots?",
            "Transitioning {surface_n} -> {surface_n2}: what do I need to change?",
        ),
    ),
    F(
        "ntrp_next_level_n",
        "tennis",
        (
            "What skills do I need to move up from {ntrp_n} to the next rating?",
            "I'm {ntrp_n}. What should I work on to get bumped up a level?",
            "Getting past {ntrp_n}: which parts of my game hold me back?",
        ),
    ),
    # homebrewing
    F(
        "hops_style_n",
        "homebrewing",
        (
            "Which hop varieties [fit|don't belong in] my {beerstyle_n}?",
            "Brewing a batch of {beerstyle_n} - what hops [are appropriate|would be out of place]?",
            "{beerstyle_n} recipe: hop choices that [work|clash with the style]?",
        ),
    ),
    F(
        "cleaner_vessel_n",
        "homebrewing",
        (
            "Which cleaning products [are safe|are unsafe] to use on my {vessel_n}?",
            "What can I [safely clean|not safely clean] my {vessel_n} with?",
            "Scrubbing out my {vessel_n}: which cleaners [won't damage it|will damage it]?",
        ),
    ),
    F(
        "ferm_temp_yeast_n",
        "homebrewing",
        (
            "What happens if I ferment {yeast_n} {mod_fermtemp_n} than its recommended range?",
            "Running my {yeast_n} fermentation {mod_fermtemp_n} than the spec sheet says - what will that do to the beer?",
            "{yeast_n} pitched and kept {mod_fermtemp_n} than recommended: effects on flavor?",
        ),
    ),
    F(
        "finish_body_n",
        "homebrewing",
        (
            "How do I make my next all-grain batch finish {mod_finish_n}?",
            "What should I change in my all-grain process so the beer ends up {mod_finish_n}?",
            "Want my all-grain homebrew {mod_finish_n} next time - what do I tweak?",
        ),
    ),
    F(
        "priming_sugar_n",
        "homebrewing",
        (
            "How much priming sugar should I use to bottle {batch_n} of {beerstyle_n}?",
            "Bottling {batch_n} of {beerstyle_n} this weekend: how much corn sugar do I add?",
            "What amount of dextrose do I need to carbonate {batch_n} of {beerstyle_n} in bottles?",
        ),
    ),
    F(
        "barleywine_age_n",
        "homebrewing",
        (
            "How will my bottled homebrew barleywine taste after {cellar_n} of cellaring?",
            "What flavor changes should I expect once my barleywine has aged {cellar_n} in the bottle?",
            "Barleywine cellared for {cellar_n}: how does it compare to when it was fresh?",
        ),
    ),
]

# ==== origami, skateboarding, rowing (names end with _o) =========================================

_LEXICONS_O: dict[str, Lexicon] = {
    # origami
    "mod_crease_o": ("antonym", [("valley",), ("mountain",)], True),
    "mod_reverse_o": ("antonym", [("inside reverse",), ("outside reverse",)], True),
    "ori_paper_o": (
        "entity",
        [
            ("kami",),
            ("washi",),
            ("tissue foil",),
            ("elephant hide",),
            ("printer paper", "copy paper"),
        ],
        False,
    ),
    "ori_base_o": (
        "entity",
        [("bird base", "crane base"), ("waterbomb base",), ("frog base",), ("fish base",)],
        False,
    ),
    "ori_model_o": (
        "entity",
        [
            ("jumping frog",),
            ("flapping bird",),
            ("fortune teller", "cootie catcher"),
            ("masu box",),
        ],
        False,
    ),
    "ori_aud_o": (
        "audience",
        [
            ("kindergarteners", "five-year-olds"),
            ("arthritic seniors", "older folks with arthritic hands"),
            ("blind students", "visually impaired students"),
        ],
        False,
    ),
    "ori_units_o": (
        "quantity",
        [
            ("6 sonobe units", "six sonobe units"),
            ("12 sonobe units", "twelve sonobe units"),
            ("30 sonobe units", "thirty sonobe units"),
        ],
        False,
    ),
    # skateboarding
    "mod_spin_o": ("antonym", [("frontside",), ("backside",)], True),
    "act_truck_o": ("antonym", [("tighten up",), ("loosen up",)], True),
    "sk_duro_o": ("quantity", [("78a",), ("87a",), ("99a",), ("101a",)], False),
    "sk_trick_o": (
        "entity",
        [("kickflip",), ("heelflip",), ("pop shove-it", "pop shuvit"), ("varial flip",)],
        False,
    ),
    "sk_board_o": (
        "entity",
        [("longboard",), ("cruiser board",), ("penny board",), ("surfskate", "surf skateboard")],
        False,
    ),
    "sk_aud_o": (
        "audience",
        [
            ("primary-school kids", "elementary-age kids"),
            ("adults over forty", "40-plus adults"),
            ("college commuters", "university students who commute"),
        ],
        False,
    ),
    "sk_part_o": (
        "entity",
        [("grip tape",), ("bushings",), ("bearings",), ("skate wheels",)],
        False,
    ),
    # rowing
    "act_blade_o": ("antonym", [("feather",), ("square",)], True),
    "row_boat_o": (
        "entity",
        [
            ("single scull",),
            ("double scull",),
            ("coxless pair", "straight pair"),
            ("quad scull", "quadruple scull"),
        ],
        False,
    ),
    "row_rate_o": (
        "quantity",
        [
            ("18 spm", "18 strokes per minute"),
            ("24 spm", "24 strokes per minute"),
            ("32 spm", "32 strokes per minute"),
        ],
        False,
    ),
    "row_phase_o": (
        "entity",
        [("drive",), ("recovery",), ("catch",), ("finish",)],
        False,
    ),
    "row_masters_o": (
        "tier",
        [("Masters A",), ("Masters D",), ("Masters G",), ("Masters J",)],
        False,
    ),
    "row_season_o": (
        "time",
        [
            ("over the off-season", "during the off-season"),
            ("during taper week", "in the taper week before a big race"),
            ("the day after a hard race", "the morning after racing hard"),
        ],
        False,
    ),
}

_FAMILIES_O = [
    # ---------------- origami ----------------
    F(
        "crease_kind_o",
        "origami",
        (
            "How do I make a {mod_crease_o} fold in origami?",
            "Explain the technique for folding a clean {mod_crease_o} crease, step by step please",
            "Origami basics: {mod_crease_o} fold — which way does the paper go?",
        ),
    ),
    F(
        "reverse_fold_o",
        "origami",
        (
            "What's the trick to doing an {mod_reverse_o} fold without tearing the paper?",
            "Can you walk me through an {mod_reverse_o} fold? Mine always end up crumpled",
            "{mod_reverse_o} fold on a thin point — how do you do it neatly?",
        ),
    ),
    F(
        "wet_fold_paper_o",
        "origami",
        (
            "Why [should|shouldn't] I use {ori_paper_o} for wet-folding?",
            "What are the reasons [to pick|to avoid] {ori_paper_o} when you wet-fold a model?",
            "Wet-folding with {ori_paper_o}: [what makes it a good choice|what makes it a bad choice]?",
        ),
    ),
    F(
        "base_models_o",
        "origami",
        (
            "Which classic models [can|can't] be folded starting from the {ori_base_o}?",
            "List the traditional designs that [are|are not] built on a {ori_base_o}",
            "Got a {ori_base_o} folded — what well-known figures [can I turn it into|is it no use for]?",
        ),
    ),
    F(
        "teach_model_o",
        "origami",
        (
            "How do I teach {ori_aud_o} to fold a {ori_model_o}?",
            "Any advice for running a {ori_model_o} folding session with {ori_aud_o}?",
            "Workshop planning: showing {ori_aud_o} how to make a paper {ori_model_o}, what works best?",
        ),
    ),
    F(
        "sonobe_shape_o",
        "origami",
        (
            "What shape do you get by assembling {ori_units_o}?",
            "If I lock together {ori_units_o}, which polyhedron does that make?",
            "Modular origami with {ori_units_o} — what's the finished form?",
        ),
    ),
    # ---------------- skateboarding ----------------
    F(
        "spin_180_o",
        "skateboarding",
        (
            "How do I land a {mod_spin_o} 180 on my skateboard?",
            "Teach me the {mod_spin_o} 180 ollie: shoulders, feet, when to turn?",
            "Skating: I keep under-rotating my {mod_spin_o} one-eighty, how do I get it all the way around?",
        ),
    ),
    F(
        "truck_nut_o",
        "skateboarding",
        (
            "How do I {act_truck_o} my skateboard trucks?",
            "Which way should I turn the kingpin nut to {act_truck_o} the trucks on my board?",
            "Trucks on my deck — how do I {act_truck_o} the kingpin, and what tool do I need?",
        ),
    ),
    F(
        "wheel_hardness_o",
        "skateboarding",
        (
            "What kind of skating are {sk_duro_o} wheels made for?",
            "Where do {sk_duro_o} skateboard wheels ride best: street, park, or rough roads?",
            "Wheel durometer {sk_duro_o} — which terrain is that hardness meant for?",
        ),
    ),
    F(
        "trick_habits_o",
        "skateboarding",
        (
            "What [should I do|should I avoid] when trying to land my first {sk_trick_o}?",
            "Learning the {sk_trick_o}: [which habits help|which habits hold you back]?",
            "Give me the [dos|don'ts] for nailing a {sk_trick_o} on flat ground",
        ),
    ),
    F(
        "first_board_o",
        "skateboarding",
        (
            "Why [should|shouldn't] {sk_aud_o} start out on a {sk_board_o}?",
            "For {sk_aud_o}, what are the [upsides|downsides] of a {sk_board_o} as a first ride?",
            "Buying a {sk_board_o} for {sk_aud_o} who have never skated: reasons [for|against]?",
        ),
    ),
    F(
        "replace_part_o",
        "skateboarding",
        (
            "How often should I replace the {sk_part_o} on my skateboard?",
            "When is it time to swap out worn {sk_part_o}, and what are the signs?",
            "Board maintenance: what's the usual lifespan of {sk_part_o} before a swap is due?",
        ),
    ),
    # ---------------- rowing ----------------
    F(
        "blade_timing_o",
        "rowing",
        (
            "At what point in the stroke should I {act_blade_o} the blade?",
            "Timing question — when do rowers {act_blade_o} the oar, and how do you do it smoothly?",
            "Tell me exactly when to {act_blade_o} my blade during each stroke",
        ),
    ),
    F(
        "switch_boat_o",
        "rowing",
        (
            "What changes in technique when going from a {row_boat_o} to a {row_boat_o2}?",
            "I'm moving out of a {row_boat_o} and into a {row_boat_o2} — what do I need to adjust?",
            "Tips for a rower transitioning from the {row_boat_o} to the {row_boat_o2}?",
        ),
    ),
    F(
        "rate_purpose_o",
        "rowing",
        (
            "What's the point of rowing a piece at {row_rate_o}?",
            "In a training plan, what are pieces rated at {row_rate_o} meant to develop?",
            "Stroke rate {row_rate_o}: what kind of workout is that usually for?",
        ),
    ),
    F(
        "phase_body_o",
        "rowing",
        (
            "During the {row_phase_o}, which body parts [should|shouldn't] be moving?",
            "In the {row_phase_o} phase of the rowing stroke, what [ought to be in motion|ought to stay still]?",
            "Rowing technique, {row_phase_o}: [what moves|what stays quiet] in the body?",
        ),
    ),
    F(
        "masters_age_o",
        "rowing",
        (
            "What's the age range for the {row_masters_o} category in masters rowing?",
            "Which ages race in {row_masters_o} at a masters regatta?",
            "Masters rowing question: {row_masters_o} covers rowers of what age?",
        ),
    ),
    F(
        "season_workouts_o",
        "rowing",
        (
            "Which workouts [belong|don't belong] in a rower's plan {row_season_o}?",
            "Planning training {row_season_o}: [what sessions make sense|what sessions should be left out]?",
            "[Which erg and water sessions should I do|Which erg and water sessions should I skip] {row_season_o}?",
        ),
    ),
]

# ==== fencing, cheesemaking, hamradio (names end with _y) ========================================

_LEXICONS_Y: dict[str, Lexicon] = {
    # fencing
    "weapon_y": ("entity", [("foil",), ("épée", "epee"), ("sabre", "saber")], False),
    "act_step_y": ("antonym", [("advance", "step forward"), ("retreat", "step back")], True),
    "mod_height_y": ("antonym", [("taller",), ("shorter",)], True),
    "mod_dir_y": ("antonym", [("forward",), ("backward", "rearward")], True),
    "touches_y": (
        "quantity",
        [("5-touch", "five-touch"), ("10-touch", "ten-touch"), ("15-touch", "fifteen-touch")],
        False,
    ),
    # cheesemaking
    "eater_y": (
        "audience",
        [
            ("mothers-to-be", "expecting moms"),
            ("people on MAOIs", "folks taking MAOI antidepressants"),
            ("lactose-intolerant eaters", "people who are lactose intolerant"),
        ],
        False,
    ),
    "rind_y": (
        "entity",
        [
            ("bloomy-rind cheese", "Brie-style cheese"),
            ("washed-rind cheese",),
            ("natural-rind tomme",),
            ("blue-veined cheese",),
        ],
        False,
    ),
    "act_humid_y": ("antonym", [("humidify", "add moisture to"), ("dehumidify", "dry out")], True),
    "mod_milk_y": ("antonym", [("raw-milk", "unpasteurized"), ("pasteurized",)], True),
    "cheese_y": (
        "entity",
        [("Gruyère", "Gruyere"), ("Stilton",), ("Camembert",), ("Manchego",)],
        False,
    ),
    "milkvol_y": (
        "quantity",
        [
            ("3 gallons", "three gallons"),
            ("7 gallons", "seven gallons"),
            ("15 gallons", "fifteen gallons"),
        ],
        False,
    ),
    # hamradio
    "license_y": (
        "tier",
        [("Technician-class", "Tech-class"), ("General-class",), ("Amateur Extra", "Extra-class")],
        False,
    ),
    "act_split_y": ("antonym", [("transmit",), ("listen",)], True),
    "mod_sideband_y": ("antonym", [("upper sideband",), ("lower sideband", "LSB")], True),
    "service_y": (
        "entity",
        [
            ("the amateur bands", "ham radio"),
            ("CB radio", "the Citizens Band"),
            ("GMRS", "General Mobile Radio Service"),
            ("FRS", "Family Radio Service"),
        ],
        False,
    ),
    "daypart_y": (
        "time",
        [
            ("at local noon", "around noon local time"),
            ("right after sunset", "just past dusk"),
            ("before dawn", "in the predawn hours"),
        ],
        False,
    ),
    "digimode_y": (
        "entity",
        [("FT8",), ("SSTV", "slow-scan TV"), ("RTTY", "radioteletype"), ("Winlink",)],
        False,
    ),
}

_FAMILIES_Y = [
    # ---- fencing
    F(
        "target_area_y",
        "fencing",
        (
            "Which parts of the body [are|aren't] valid target in {weapon_y}?",
            "In {weapon_y}, where on my opponent [does|doesn't] a hit count as a touch?",
            "{weapon_y} rules: what areas of the body [are on target|are off-target]?",
        ),
    ),
    F(
        "sabre_footwork_y",
        "fencing",
        (
            "Which {mod_dir_y} footwork moves [are allowed|are banned] in sabre?",
            "Sabre fencers: which ways of moving {mod_dir_y} on the strip [are legal|are penalized]?",
            "In a sabre bout, what kinds of {mod_dir_y} steps [can|can't] you make?",
        ),
    ),
    F(
        "step_speed_y",
        "fencing",
        (
            "How do I {act_step_y} faster on the piste without losing my balance?",
            "Any drills so I can {act_step_y} quicker while staying in a solid en garde?",
            "Footwork help: want to {act_step_y} more explosively but I keep getting off balance",
        ),
    ),
    F(
        "height_matchup_y",
        "fencing",
        (
            "How should I fence against a much {mod_height_y} opponent?",
            "Tactics for a bout vs someone way {mod_height_y} than me?",
            "Facing a fencer who's a lot {mod_height_y}: what do I change in my game?",
        ),
    ),
    F(
        "switch_weapon_y",
        "fencing",
        (
            "What's hardest about switching from {weapon_y} to {weapon_y2}?",
            "I've fenced {weapon_y} for years and am now taking up {weapon_y2}. What will trip me up most?",
            "Moving over from {weapon_y} to {weapon_y2}: which habits are toughest to adjust?",
        ),
    ),
    F(
        "bout_time_y",
        "fencing",
        (
            "How long can a {touches_y} bout last at most?",
            "What's the maximum time on the clock for a {touches_y} bout?",
            "Fencing a {touches_y} bout: what's the total time limit?",
        ),
    ),
    # ---- cheesemaking
    F(
        "rind_mold_y",
        "cheesemaking",
        (
            "Which molds on a {rind_y} [are harmless|are dangerous]?",
            "Fuzzy growth on the {rind_y} I'm aging: what kinds [are fine to leave|should worry me]?",
            "Aging a {rind_y}: which mold types [are nothing to worry about|are a real safety problem]?",
        ),
    ),
    F(
        "safe_for_y",
        "cheesemaking",
        (
            "Which homemade cheeses [are safe|are unsafe] for {eater_y}?",
            "I make cheese at home. What kinds [can|shouldn't] I serve to {eater_y}?",
            "Cheeses from my own kitchen and {eater_y}: which ones [are okay|should be avoided]?",
        ),
    ),
    F(
        "cave_humidity_y",
        "cheesemaking",
        (
            "How do I {act_humid_y} my cheese cave?",
            "Best way to {act_humid_y} the wine fridge I use for aging cheese?",
            "Ripening chamber for my wheels: what's a simple way to {act_humid_y} it?",
        ),
    ),
    F(
        "sell_young_y",
        "cheesemaking",
        (
            "Can I legally sell {mod_milk_y} cheese aged under 60 days in the US?",
            "US rules: is selling young {mod_milk_y} cheese, less than 60 days old, allowed?",
            "Selling {mod_milk_y} cheese in America before it reaches 60 days of age, is that legal?",
        ),
    ),
    F(
        "starter_culture_y",
        "cheesemaking",
        (
            "Which cultures should I use for {cheese_y}?",
            "What cultures go into homemade {cheese_y}?",
            "Culture choice for a batch of {cheese_y}?",
        ),
    ),
    F(
        "rennet_dose_y",
        "cheesemaking",
        (
            "How much rennet do I need for {milkvol_y} of milk?",
            "Rennet dose when setting {milkvol_y} of milk?",
            "Making cheese from {milkvol_y} of milk: what amount of rennet goes in?",
        ),
    ),
    # ---- hamradio
    F(
        "hf_privileges_y",
        "hamradio",
        (
            "Which HF bands [can|can't] {license_y} licensees transmit on?",
            "Holding {license_y} privileges, where on HF am I [allowed|not allowed] to operate?",
            "{license_y} privileges on the HF bands: which ones [are open to me|are off-limits]?",
        ),
    ),
    F(
        "message_rules_y",
        "hamradio",
        (
            "What kinds of messages [are permitted|are prohibited] on {service_y}?",
            "On {service_y}, what [can|can't] I talk about or send?",
            "Content rules for {service_y}: what's [allowed|forbidden] on the air?",
        ),
    ),
    F(
        "split_dx_y",
        "hamradio",
        (
            "Working a DX station that's operating split, which frequency do I {act_split_y} on?",
            "In a split pileup, where should I {act_split_y}?",
            "Split operation: what frequency to {act_split_y} on when chasing DX?",
        ),
    ),
    F(
        "sideband_bands_y",
        "hamradio",
        (
            "Which ham bands use {mod_sideband_y} by convention?",
            "On what HF bands is {mod_sideband_y} the normal voice mode?",
            "{mod_sideband_y}: on which bands is it the standard for phone contacts?",
        ),
    ),
    F(
        "band_opening_y",
        "hamradio",
        (
            "Which HF bands are usually open {daypart_y}?",
            "What bands should I try {daypart_y} if I want to make contacts?",
            "Propagation {daypart_y}: best HF bands to get on?",
        ),
    ),
    F(
        "digimode_setup_y",
        "hamradio",
        (
            "What do I need to get started with {digimode_y}?",
            "Setting up my station for {digimode_y}: what gear and software does it take?",
            "Getting on the air with {digimode_y}, what equipment is required?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_N, **_LEXICONS_O, **_LEXICONS_Y}
FAMILIES: list[F] = _FAMILIES_N + _FAMILIES_O + _FAMILIES_Y
