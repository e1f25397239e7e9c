"""An eighth held-out set for the semantic verifier (written 2026-12-07, stop 49, frozen since).

Why: the seven earlier held-out sets have each decided something and been looked at since; the
verifier trained with its calibration split by whole domains (bench/train_verifier.py
``--calibrate-by domain``) needs data nobody has seen to be decided on. These 54 families were
written for it, by three people in parallel from one brief, before any model was run on them: in
nine domains no other family has (contrast_data.FRESH7_DOMAINS), with lexicons that repeat no
value of any other lexicon and name no distinctive value either round of written triplets uses
(checked). Rows: ``contrast_fresh7.jsonl`` and ``multiturn_fresh7.jsonl`` (seed 21); nothing
trains or calibrates on them. Never tune on them: measure.

Lexicon and family names end with the two letters of the part they come from (``_za``, ``_zb``,
``_zc``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== bonsai, leathercraft, soapmaking (names end with _za) ======================================

_LEXICONS_ZA: dict[str, Lexicon] = {
    # bonsai
    "species_za": (
        "entity",
        [
            ("trident maple", "Acer buergerianum"),
            ("Chinese elm", "Ulmus parvifolia"),
            ("Japanese black pine", "Pinus thunbergii"),
            ("Fukien tea", "Carmona microphylla"),
            ("bald cypress", "Taxodium distichum"),
        ],
        False,
    ),
    "act_wire_za": (
        "antonym",
        [("wire", "apply wire to"), ("unwire", "remove the wire from")],
        True,
    ),
    "mod_vigor_za": (
        "antonym",
        [("vigorous", "strong-growing"), ("weak", "struggling")],
        True,
    ),
    "collected_za": (
        "time",
        [
            ("thirteen days", "13 days"),
            ("seven months", "7 months"),
            ("two growing seasons", "two full growing seasons"),
        ],
        False,
    ),
    "grower_za": (
        "audience",
        [
            ("apartment dwellers without a balcony", "apartment dwellers with no balcony"),
            ("growers in frost-free tropical climates", "growers in the frost-free tropics"),
            ("growers facing minus-thirty winters", "growers with minus-thirty winters"),
            (
                "people away on business every other week",
                "people who travel for work every other week",
            ),
        ],
        False,
    ),
    "size_za": (
        "tier",
        [("shohin", "shohin-size"), ("chuhin", "chuhin-size"), ("omono", "omono-size")],
        False,
    ),
    # leathercraft
    "leather_za": (
        "entity",
        [
            ("vegetable-tanned leather", "veg-tan leather"),
            ("chrome-tanned leather", "chrome-tan leather"),
            ("oil-tanned pull-up leather", "pull-up leather"),
            ("brain-tanned buckskin", "brain-tan buckskin"),
        ],
        False,
    ),
    "weight_za": (
        "quantity",
        [("2 oz", "2-ounce"), ("6 oz", "6-ounce"), ("12 oz", "12-ounce")],
        False,
    ),
    "grade_za": (
        "tier",
        [("top-grade", "premium-grade"), ("B-grade", "grade B"), ("C-grade", "grade C")],
        False,
    ),
    "act_firm_za": (
        "antonym",
        [("make supple", "make pliable"), ("stiffen", "make rigid")],
        True,
    ),
    "case_za": (
        "time",
        [
            ("twenty-five minutes", "25 minutes"),
            ("sixteen hours", "16 hours"),
            ("four days", "4 days"),
        ],
        False,
    ),
    # soapmaking
    "oil_za": (
        "entity",
        [
            ("babassu oil",),
            ("rice bran oil",),
            ("meadowfoam seed oil", "meadowfoam oil"),
            ("high-oleic sunflower oil", "high oleic sunflower oil"),
            ("mango butter",),
        ],
        False,
    ),
    "act_gel_za": (
        "antonym",
        [("force gel phase", "encourage gel phase"), ("prevent gel phase", "stop gel phase")],
        True,
    ),
    "mod_trace_za": (
        "antonym",
        [("thin trace", "light trace"), ("thick trace", "heavy trace")],
        True,
    ),
    "unmold_za": (
        "time",
        [("six hours", "6 hours"), ("thirty hours", "30 hours"), ("five weeks", "35 days")],
        False,
    ),
    "superfat_za": (
        "quantity",
        [
            ("0.5%", "half a percent"),
            ("3.5%", "three and a half percent"),
            ("17%", "seventeen percent"),
        ],
        False,
    ),
    "skin_za": (
        "audience",
        [
            ("people with eczema-prone skin", "eczema sufferers"),
            ("newborns", "newborn babies"),
            ("mechanics scrubbing off grease", "grease-covered mechanics"),
            ("people with nut allergies", "nut-allergic people"),
        ],
        False,
    ),
}

_FAMILIES_ZA = [
    # bonsai
    F(
        "repot_season_za",
        "bonsai",
        (
            "Which months are [good|bad] for repotting a {species_za} bonsai?",
            "When [should|shouldn't] I disturb the roots of my {species_za}?",
            "Root work on a {species_za}: what time of year [is ideal|is risky]?",
        ),
    ),
    F(
        "wire_branch_za",
        "bonsai",
        (
            "How do I {act_wire_za} a bonsai branch without scarring the bark?",
            "What's the right technique to {act_wire_za} a limb on my little tree so it doesn't get marked?",
            "Trying to {act_wire_za} a branch safely - any tips to keep the bark unharmed?",
        ),
    ),
    F(
        "prune_vigor_za",
        "bonsai",
        (
            "How should I prune a {mod_vigor_za} bonsai?",
            "My tree is {mod_vigor_za} right now - how much can I cut back?",
            "Trimming strategy for a {mod_vigor_za} specimen?",
        ),
    ),
    F(
        "yamadori_styling_za",
        "bonsai",
        (
            "I dug up a tree from the wild {collected_za} ago. Can I start styling it yet?",
            "Is a yamadori collected {collected_za} back ready for wiring and heavy pruning?",
            "Wild-collected specimen, lifted {collected_za} ago: time to begin shaping, or wait?",
        ),
    ),
    F(
        "species_for_grower_za",
        "bonsai",
        (
            "Which bonsai species [do well|tend to fail] for {grower_za}?",
            "Recommend trees that [suit|are wrong for] {grower_za} wanting to keep bonsai.",
            "Bonsai for {grower_za}: which kinds [thrive|struggle]?",
        ),
    ),
    F(
        "soil_grain_size_za",
        "bonsai",
        (
            "What particle size of substrate should I use for a {size_za} bonsai?",
            "How coarse should the soil mix be for my {size_za} tree?",
            "Grit sizing for a {size_za} planting - which sieve fraction?",
        ),
    ),
    # leathercraft
    F(
        "dye_leather_type_za",
        "leathercraft",
        (
            "Which dyes [take well|won't take] on {leather_za}?",
            "What colorants [absorb evenly into|fail to penetrate] {leather_za}?",
            "Coloring {leather_za}: which stains [work|don't work]?",
        ),
    ),
    F(
        "thread_for_weight_za",
        "leathercraft",
        (
            "What thread thickness should I hand-stitch {weight_za} leather with?",
            "Saddle stitching {weight_za} hide - which thread diameter fits?",
            "I'm sewing {weight_za} leather by hand; how heavy a thread do I need?",
        ),
    ),
    F(
        "hide_grade_use_za",
        "leathercraft",
        (
            "Which projects [can|shouldn't] be cut from a {grade_za} side of leather?",
            "What [is|isn't] a sensible use for a {grade_za} hide?",
            "Got a {grade_za} side: what items [is it suited to|is it unsuited to]?",
        ),
    ),
    F(
        "belt_firmness_za",
        "leathercraft",
        (
            "How do I {act_firm_za} a leather belt strap?",
            "What's the best method to {act_firm_za} leather for a belt?",
            "Need to {act_firm_za} a strip of belt leather - how?",
        ),
    ),
    F(
        "switch_leather_za",
        "leathercraft",
        (
            "I'm switching from {leather_za} to {leather_za2} - what changes in how I cut, stitch and finish?",
            "What do I need to do differently when moving from {leather_za} over to {leather_za2}?",
            "Going {leather_za} -> {leather_za2}: which techniques must I adapt?",
        ),
    ),
    F(
        "casing_time_za",
        "leathercraft",
        (
            "Can I still tool leather that's been cased for {case_za}?",
            "My leather has been sitting cased for {case_za} - is it in good shape to stamp and carve?",
            "Leather cased {case_za}: still fine for tooling?",
        ),
    ),
    # soapmaking
    F(
        "oil_substitution_za",
        "soapmaking",
        (
            "If I replace the {oil_za} in my cold process recipe with {oil_za2}, what do I need to change?",
            "Substituting {oil_za2} for {oil_za} in a soap formula: how does that affect the lye amount and the finished bar?",
            "I want to use {oil_za2} instead of {oil_za} in my soap; what adjustments are needed?",
        ),
    ),
    F(
        "gel_phase_za",
        "soapmaking",
        (
            "How do I {act_gel_za} in a loaf of cold process soap?",
            "What's the trick to {act_gel_za} when I pour a CP batch into the mold?",
            "Want to {act_gel_za} for my next loaf - what should I do?",
        ),
    ),
    F(
        "trace_designs_za",
        "soapmaking",
        (
            "Which soap techniques are best done at {mod_trace_za}?",
            "My batter is at {mod_trace_za} - what designs can I pull off now?",
            "Decorative methods suited to raw soap at {mod_trace_za}?",
        ),
    ),
    F(
        "unmold_time_za",
        "soapmaking",
        (
            "My cold process batch has been in the mold for {unmold_za}. Should I unmold it now?",
            "Is it time to pop out soap that's sat in its mold {unmold_za}?",
            "CP loaf, {unmold_za} since pouring: okay to take it out and slice?",
        ),
    ),
    F(
        "superfat_level_za",
        "soapmaking",
        (
            "What are the [benefits|drawbacks] of a {superfat_za} superfat in cold process soap?",
            "Setting my lye calculator to {superfat_za} superfat: [what do I gain|what are the downsides]?",
            "Why [would|wouldn't] a soaper pick a {superfat_za} superfat?",
        ),
    ),
    F(
        "soap_for_skin_za",
        "soapmaking",
        (
            "Which oils and additives [suit|should be avoided in] soap for {skin_za}?",
            "Making bars for {skin_za}: what ingredients [belong in|should stay out of] the recipe?",
            "What [should|shouldn't] I put in a soap intended for {skin_za}?",
        ),
    ),
]


# ==== curling, cricket, volleyball (names end with _zb) ==========================================

_LEXICONS_ZB: dict[str, Lexicon] = {
    # curling
    "cshot_zb": (
        "entity",
        [
            ("hit-and-roll", "hit and roll"),
            ("raise takeout", "raised takeout"),
            ("double takeout",),
            ("come-around draw", "come-around"),
        ],
        False,
    ),
    "mod_hammer_zb": (
        "antonym",
        [
            ("holding the hammer", "holding last-stone advantage"),
            ("without the hammer", "lacking last-stone advantage"),
        ],
        True,
    ),
    "curler_zb": (
        "audience",
        [
            ("curlers with arthritic knees", "curlers whose knees are arthritic"),
            ("curlers under ten", "curlers younger than ten"),
            ("juniors chasing a national title", "juniors competing for a national championship"),
            ("wheelchair curlers", "curlers who use wheelchairs"),
        ],
        False,
    ),
    "split_zb": (
        "time",
        [
            ("8.5 seconds", "eight and a half seconds"),
            ("13.8 seconds", "thirteen point eight seconds"),
            ("16.2 seconds", "sixteen point two seconds"),
        ],
        False,
    ),
    "cpos_zb": (
        "entity",
        [
            ("the lead position", "playing lead"),
            ("the second position", "playing second"),
            ("vice-skip", "the vice position"),
            ("the skip position", "playing skip"),
        ],
        False,
    ),
    "margin_zb": (
        "quantity",
        [
            ("one point", "a single point"),
            ("three points", "3 points"),
            ("five points", "5 points"),
        ],
        False,
    ),
    # cricket
    "delivery_zb": (
        "entity",
        [
            ("googly", "wrong'un"),
            ("doosra",),
            ("off-cutter", "off cutter"),
            ("leg-cutter", "leg cutter"),
        ],
        False,
    ),
    "mod_field_zb": (
        "antonym",
        [("taking wickets", "picking up wickets"), ("saving runs", "stopping runs")],
        True,
    ),
    "act_declare_zb": (
        "antonym",
        [("declare", "close our innings"), ("bat on", "keep batting")],
        True,
    ),
    "extra_zb": (
        "entity",
        [
            ("no-ball", "front-foot no-ball"),
            ("wide", "wide delivery"),
            ("fair delivery", "legal delivery"),
        ],
        False,
    ),
    "crlevel_zb": (
        "tier",
        [
            ("Sunday village-league", "village Sunday-league"),
            ("school first-XI", "schoolboy first-eleven"),
            ("first-class county", "professional county"),
        ],
        False,
    ),
    "overs_zb": (
        "quantity",
        [("ten-over", "10-over"), ("twenty-over", "T20"), ("fifty-over", "50-over ODI-style")],
        False,
    ),
    # volleyball
    "vpos_zb": (
        "entity",
        [
            ("outside hitter", "left-side hitter"),
            ("libero",),
            ("middle blocker", "middle hitter"),
            ("opposite hitter", "right-side hitter"),
        ],
        False,
    ),
    "vserve_zb": (
        "entity",
        [
            ("jump float serve", "jump floater"),
            ("topspin jump serve", "spin jump serve"),
            ("underhand serve", "underarm serve"),
            ("skyball serve", "sky ball serve"),
        ],
        False,
    ),
    "vtier_zb": (
        "tier",
        [
            ("rec-league", "recreational-league"),
            ("high-school JV", "junior-varsity high-school"),
            ("NCAA Division I", "Division I college"),
        ],
        False,
    ),
    "mod_wind_zb": (
        "antonym",
        [("gusty", "blustery"), ("windless", "dead-calm")],
        True,
    ),
    "netgroup_zb": (
        "audience",
        [
            ("adult women", "women's adult play"),
            ("adult men", "men's adult play"),
            ("girls 12 and under", "12U girls"),
            ("sitting volleyball players", "players in sitting volleyball"),
        ],
        False,
    ),
    "gap_zb": (
        "time",
        [
            ("thirty-five minutes", "35 minutes"),
            ("three hours", "3 hours"),
            ("a full night", "an entire night"),
        ],
        False,
    ),
}

_FAMILIES_ZB = [
    # curling
    F(
        "curl_shot_tech_zb",
        "curling",
        (
            "How do I execute a {cshot_zb} in curling?",
            "Walk me through throwing the {cshot_zb} - weight, line and sweeping.",
            "I keep missing my {cshot_zb} attempts on the sheet. What's the proper technique?",
        ),
    ),
    F(
        "curl_tied_last_end_zb",
        "curling",
        (
            "Tied score, final end, and we're {mod_hammer_zb}: what strategy should the skip call?",
            "How should a rink play the last end of a level game when {mod_hammer_zb}?",
            "We're all square going into the tenth end, {mod_hammer_zb}. Best game plan?",
        ),
    ),
    F(
        "curl_delivery_stick_zb",
        "curling",
        (
            "Is a delivery stick [a good fit|a poor fit] for {curler_zb}?",
            "For {curler_zb}, [does it make sense|is it a mistake] to throw with a cue instead of sliding out of the hack?",
            "{curler_zb} using a push stick: [sensible choice|bad choice]?",
        ),
    ),
    F(
        "curl_split_time_zb",
        "curling",
        (
            "What does a hog-to-hog split of {split_zb} tell me about the throw?",
            "My stopwatch read {split_zb} between the hog lines. What kind of weight is that?",
            "Interpreting a {split_zb} split time on the stone: draw, guard or takeout?",
        ),
    ),
    F(
        "curl_position_switch_zb",
        "curling",
        (
            "What's the biggest adjustment when moving from {cpos_zb} to {cpos_zb2}?",
            "Our team wants me to go from {cpos_zb} over to {cpos_zb2}. Which new duties and skills should I prepare for?",
            "Changing roles, {cpos_zb} -> {cpos_zb2}: what do I need to learn?",
        ),
    ),
    F(
        "curl_lead_no_hammer_zb",
        "curling",
        (
            "Up by {margin_zb} in the last end without hammer: [is it wise|is it a mistake] to keep the house clear with takeouts?",
            "We lead by {margin_zb} heading into the final end and they have last rock. [Should we|Would it be wrong to] play a pure hitting game?",
            "Protecting our lead of {margin_zb}, opponents throwing last stone: peeling everything - [smart|foolish]?",
        ),
    ),
    # cricket
    F(
        "cric_bowl_delivery_zb",
        "cricket",
        (
            "How do I bowl a {delivery_zb}?",
            "Teach me the grip and wrist action for the {delivery_zb}.",
            "I want to add a {delivery_zb} to my bowling - what's the technique?",
        ),
    ),
    F(
        "cric_field_setting_zb",
        "cricket",
        (
            "How should the captain set the field for an off-spinner on a turning pitch when the priority is {mod_field_zb}?",
            "Our finger-spinner is bowling on a dusty track and we care most about {mod_field_zb} - where do I put my fielders?",
            "Off-break bowler, pitch is gripping, focus on {mod_field_zb}: field placings?",
        ),
    ),
    F(
        "cric_declare_zb",
        "cricket",
        (
            "We lead comfortably going into day four of a Test. What are the arguments to {act_declare_zb} now?",
            "Our side is well ahead with two days left in a five-day match - why would the captain choose to {act_declare_zb}?",
            "Big first-innings advantage, day four morning: the case to {act_declare_zb}?",
        ),
    ),
    F(
        "cric_extra_dismissal_zb",
        "cricket",
        (
            "Off a {extra_zb}, which ways of getting out [still apply|no longer apply]?",
            "Which dismissals [can|can't] happen on a {extra_zb}?",
            "{extra_zb}: what modes of being given out [remain possible|are ruled out]?",
        ),
    ),
    F(
        "cric_training_week_zb",
        "cricket",
        (
            "What does a typical training week look like for a {crlevel_zb} cricketer?",
            "How many practice sessions and nets should a {crlevel_zb} player fit in each week?",
            "Weekly schedule of a {crlevel_zb} cricketer - what's realistic?",
        ),
    ),
    F(
        "cric_innings_pacing_zb",
        "cricket",
        (
            "In a {overs_zb} match, how should the batting side pace its innings?",
            "What's a sensible run-rate plan when we bat first in {overs_zb} cricket?",
            "{overs_zb} game, batting first: when do we accelerate and when do we consolidate?",
        ),
    ),
    # volleyball
    F(
        "vb_position_switch_zb",
        "volleyball",
        (
            "What's hardest about switching from {vpos_zb} to {vpos_zb2}?",
            "Coach is moving me from {vpos_zb} to {vpos_zb2} next season. Which habits will I need to unlearn?",
            "Converting {vpos_zb} -> {vpos_zb2}: what changes in footwork and responsibilities?",
        ),
    ),
    F(
        "vb_serve_keys_zb",
        "volleyball",
        (
            "What are the [keys to|common errors in] hitting a {vserve_zb}?",
            "When I go back to the service line for a {vserve_zb}, what [should I focus on|do players usually get wrong]?",
            "{vserve_zb}: [success factors|typical mistakes]?",
        ),
    ),
    F(
        "vb_five_one_zb",
        "volleyball",
        (
            "Should a {vtier_zb} team [run|steer clear of] a 5-1 offense?",
            "Is a single-setter 5-1 system [a good idea|a bad idea] for {vtier_zb} volleyball?",
            "{vtier_zb} squad, one setter running everything: [worth adopting|best avoided]?",
        ),
    ),
    F(
        "vb_beach_wind_zb",
        "volleyball",
        (
            "How should I adjust my serve on a {mod_wind_zb} day at the beach?",
            "Beach doubles match, conditions are {mod_wind_zb} - what serving changes make sense?",
            "Serving tweaks for {mod_wind_zb} weather on sand?",
        ),
    ),
    F(
        "vb_net_height_zb",
        "volleyball",
        (
            "How high should the net be for {netgroup_zb}?",
            "We're stringing up a court for {netgroup_zb}. What height goes at the top of the net?",
            "Regulation net height, {netgroup_zb}?",
        ),
    ),
    F(
        "vb_between_matches_zb",
        "volleyball",
        (
            "At a tournament with {gap_zb} between matches, how should players refuel and stay ready?",
            "We've got {gap_zb} before our next game - what should the team eat and do to stay sharp?",
            "Downtime of {gap_zb} mid-tournament: food and warm-up plan?",
        ),
    ),
]


# ==== falconry, stage magic, foraging (names end with _zc) =======================================

_LEXICONS_ZC: dict[str, Lexicon] = {
    # falconry
    "raptor_zc": (
        "entity",
        [
            ("Harris's hawk", "Harris hawk"),
            ("peregrine falcon", "peregrine"),
            ("northern goshawk", "goshawk"),
            ("American kestrel",),
        ],
        False,
    ),
    "act_weight_zc": (
        "antonym",
        [("fatten up", "feed up"), ("slim down", "trim down")],
        True,
    ),
    "eyassage_zc": (
        "time",
        [
            ("ten-day-old", "10-day-old"),
            ("three-week-old", "21-day-old"),
            ("five-week-old", "35-day-old"),
        ],
        False,
    ),
    "falconer_zc": (
        "audience",
        [
            ("someone who can only fly a bird at weekends", "a weekends-only falconer"),
            (
                "a falconer living in a city flat with no garden",
                "an apartment-dwelling falconer with no yard",
            ),
            ("a retiree with limited mobility", "an older falconer who can't walk far"),
        ],
        False,
    ),
    "permit_zc": (
        "tier",
        [
            ("apprentice-grade", "apprentice-licensed"),
            ("general-grade", "general-licensed"),
            ("master-grade", "master-licensed"),
        ],
        False,
    ),
    # stage and close-up magic
    "sleight_zc": (
        "entity",
        [
            ("classic pass", "two-handed pass"),
            ("Elmsley count", "ghost count"),
            ("French drop", "Tourniquet vanish"),
            ("top change",),
        ],
        False,
    ),
    "spectators_zc": (
        "audience",
        [
            ("kids at a seventh birthday party", "seven-year-olds at a birthday party"),
            ("a table of tipsy guests at a wedding reception", "tipsy wedding reception guests"),
            ("a room of engineers at a corporate dinner", "engineers at a company dinner"),
            ("residents of a care home", "care-home residents"),
        ],
        False,
    ),
    "mod_lighting_zc": (
        "antonym",
        [("harshly lit", "brightly lit"), ("dimly lit", "low-lit")],
        True,
    ),
    "act_silk_zc": (
        "antonym",
        [("vanish", "make disappear"), ("produce", "make appear")],
        True,
    ),
    "setlen_zc": (
        "time",
        [
            ("twelve-minute", "12-minute"),
            ("twenty-five-minute", "25-minute"),
            ("seventy-five-minute", "75-minute"),
        ],
        False,
    ),
    "crowd_zc": (
        "quantity",
        [
            ("six onlookers", "6 onlookers"),
            ("thirty-five onlookers", "35 onlookers"),
            ("four hundred onlookers", "400 onlookers"),
        ],
        False,
    ),
    "mod_stance_zc": (
        "antonym",
        [("all seated", "sitting down"), ("all standing", "on their feet")],
        True,
    ),
    # wild food foraging
    "wildplant_zc": (
        "entity",
        [
            ("elder", "elderberry bush"),
            ("pokeweed", "poke sallet plant"),
            ("great burdock", "greater burdock"),
            ("Japanese knotweed", "knotweed"),
        ],
        False,
    ),
    "idlevel_zc": (
        "tier",
        [
            ("first-season", "first-year"),
            ("several-seasons-in", "moderately experienced"),
            ("expert-level", "highly seasoned"),
        ],
        False,
    ),
    "forage_month_zc": (
        "time",
        [
            ("early March", "the first half of March"),
            ("late June", "the last weeks of June"),
            ("mid-October", "the middle of October"),
            ("early January", "the first half of January"),
        ],
        False,
    ),
    "mod_tide_zc": (
        "antonym",
        [
            ("at a spring low tide", "during a big spring low"),
            ("near high water", "around high tide"),
        ],
        True,
    ),
    "walkers_zc": (
        "audience",
        [
            ("a class of primary-school children", "primary schoolers"),
            ("a brigade of professional chefs", "restaurant chefs"),
            ("a group of wheelchair users", "people using wheelchairs"),
        ],
        False,
    ),
    "ramsons_zc": (
        "quantity",
        [
            ("a single handful", "one handful"),
            ("a full carrier bag", "a whole carrier bag"),
            ("twenty kilos", "twenty kilograms"),
        ],
        False,
    ),
}

_FAMILIES_ZC = [
    # falconry
    F(
        "quarry_raptor_zc",
        "falconry",
        (
            "Which game species [is a|is not a] good match for a {raptor_zc}?",
            "What quarry [can I realistically hunt|would be a poor choice to hunt] with my {raptor_zc}?",
            "{raptor_zc} out in the field: prey it [excels at catching|struggles to take]?",
        ),
    ),
    F(
        "weight_adjust_zc",
        "falconry",
        (
            "How do I safely {act_weight_zc} my hawk before the hunting season?",
            "What's the right way to {act_weight_zc} a trained bird without harming her?",
            "Need to {act_weight_zc} my raptor ahead of the season - steps and precautions?",
        ),
    ),
    F(
        "eyass_feed_zc",
        "falconry",
        (
            "How much and how often should I feed a {eyassage_zc} eyass?",
            "I'm hand-rearing a {eyassage_zc} chick: what feeding schedule and portion sizes does it need?",
            "Nestling hawk, {eyassage_zc} - meals per day and quantity?",
        ),
    ),
    F(
        "first_bird_zc",
        "falconry",
        (
            "Which raptor species [make a sensible|make a bad] first bird for {falconer_zc}?",
            "For {falconer_zc}, what hawk or falcon [would you recommend starting with|should be avoided as a starter]?",
            "Picking a beginner bird as {falconer_zc}: which ones [suit me|are a mistake]?",
        ),
    ),
    F(
        "permit_tier_zc",
        "falconry",
        (
            "Which birds [am I allowed|am I not allowed] to possess as a {permit_zc} falconer in the US?",
            "US falconry rules: what species [may|may not] a {permit_zc} permittee keep?",
            "I hold a {permit_zc} permit. Raptors that [are legal|are off-limits] for me?",
        ),
    ),
    F(
        "raptor_switch_zc",
        "falconry",
        (
            "What do I need to relearn when going from flying a {raptor_zc} to a {raptor_zc2}?",
            "I've always hunted with a {raptor_zc} and now I'm getting a {raptor_zc2} - how must my training and field craft change?",
            "Switching birds, {raptor_zc} -> {raptor_zc2}: what's different?",
        ),
    ),
    # stage and close-up magic
    F(
        "sleight_angles_zc",
        "stagemagic",
        (
            "From which viewing angles is the {sleight_zc} [safe|exposed]?",
            "Where can spectators stand so the {sleight_zc} [stays invisible|gets flashed]?",
            "{sleight_zc}: sightlines that [protect the move|give the method away]?",
        ),
    ),
    F(
        "effects_crowd_zc",
        "stagemagic",
        (
            "Which tricks [go over well|tend to flop] with {spectators_zc}?",
            "Performing for {spectators_zc} - what kinds of effects [land best|fall flat]?",
            "Booked a gig: {spectators_zc}. Routines that [get great reactions|get a poor response]?",
        ),
    ),
    F(
        "lighting_act_zc",
        "stagemagic",
        (
            "How should I adjust my close-up act for a {mod_lighting_zc} room?",
            "The venue is {mod_lighting_zc} - what do I change in my table-hopping routines?",
            "Performing intimate magic somewhere {mod_lighting_zc}: tweaks to make?",
        ),
    ),
    F(
        "thumbtip_silk_zc",
        "stagemagic",
        (
            "How do I {act_silk_zc} a silk handkerchief using a thumb tip?",
            "Using a fake thumb, what's the method to {act_silk_zc} a scarf?",
            "Thumb tip gimmick: walk me through how to {act_silk_zc} a hanky.",
        ),
    ),
    F(
        "set_resize_zc",
        "stagemagic",
        (
            "How do I turn my {setlen_zc} show into a {setlen_zc2} one?",
            "My act currently runs as a {setlen_zc} set; the booker wants a {setlen_zc2} slot. How do I rework it?",
            "Adapting a {setlen_zc} magic set to {setlen_zc2}: what should change?",
        ),
    ),
    F(
        "visibility_crowd_zc",
        "stagemagic",
        (
            "How can I keep card tricks visible to {crowd_zc} who are {mod_stance_zc}?",
            "I'll have {crowd_zc}, {mod_stance_zc}; how do I make sure everyone sees the playing cards?",
            "Sightline problem: {crowd_zc} {mod_stance_zc} and a deck of cards - what do I do?",
        ),
    ),
    # wild food foraging
    F(
        "plant_parts_zc",
        "foraging",
        (
            "Which parts of {wildplant_zc} [are edible|are poisonous]?",
            "If I harvest {wildplant_zc}, what bits [can I eat|must I never eat]?",
            "{wildplant_zc}: portions of the plant that [are fine to consume|are toxic]?",
        ),
    ),
    F(
        "mushroom_targets_zc",
        "foraging",
        (
            "Which wild mushrooms are sensible to pick for a {idlevel_zc} forager?",
            "As a {idlevel_zc} fungi hunter, what species should I be going after?",
            "Mushroom hunting, {idlevel_zc}: good fungi to target?",
        ),
    ),
    F(
        "seasonal_finds_zc",
        "foraging",
        (
            "What wild food can I gather in a temperate European woodland in {forage_month_zc}?",
            "Heading out to forage in {forage_month_zc} in northern Europe - what's in season?",
            "Edibles available in {forage_month_zc} in British woods and hedgerows?",
        ),
    ),
    F(
        "shore_tide_zc",
        "foraging",
        (
            "What can I forage on a rocky shore {mod_tide_zc}?",
            "I'm going down to the coast {mod_tide_zc} - which edible seaweeds and shellfish can I collect?",
            "Rock pools and seashore {mod_tide_zc}: what's gatherable?",
        ),
    ),
    F(
        "guided_walk_zc",
        "foraging",
        (
            "How should I plan a foraging walk for {walkers_zc}?",
            "I'm leading {walkers_zc} on a wild food outing. What do I need to organise differently?",
            "Hedgerow harvesting session with {walkers_zc}: how to run it?",
        ),
    ),
    F(
        "ramsons_amount_zc",
        "foraging",
        (
            "Is picking {ramsons_zc} of wild garlic leaves from one woodland patch sustainable?",
            "Would taking {ramsons_zc} of ramsons from a single spot harm the colony?",
            "Harvesting {ramsons_zc} of bear's garlic from the same stand - acceptable or overharvesting?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_ZA, **_LEXICONS_ZB, **_LEXICONS_ZC}
FAMILIES: list[F] = _FAMILIES_ZA + _FAMILIES_ZB + _FAMILIES_ZC
