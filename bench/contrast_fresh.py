"""A second, fresh held-out set for the semantic verifier (written 2026-12-06, frozen since).

Why: the first held-out files (bench/data/contrast_heldout.jsonl, multiturn_heldout.jsonl) had
been looked at when a verifier trained on more families (bench/contrast_more.py) was weighed, so a
decision about it needs data nobody had seen. These 54 families were written for that, by three
people in parallel from the same brief, before any model was run on them: in domains no other
family has (contrast_data.FRESH_DOMAINS) and with lexicons of their own that repeat no word of
the training lexicons (contrast_data.generate_fresh checks both). A 55th, the direction of a
temperature conversion, was dropped before any run: the adversarial set's training half asks
that very question (tests/test_contrast_data.py: no fresh question is a training one). Rows:
``contrast_fresh.jsonl`` and ``multiturn_fresh.jsonl`` (seed 14); nothing trains or calibrates
on them. Never tune on them: measure.

Lexicon and family names end with the letter of the part they come from (``_p``, ``_q``, ``_r``).
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== lodging, postal, clothing (names end with _p) ===================================

_LEXICONS_P: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_checkin_p": ("antonym", [("check in", "arrive"), ("check out", "depart")], True),
    "act_redirect_p": ("antonym", [("start", "begin"), ("stop", "end")], True),
    "act_mail_p": ("antonym", [("send", "mail"), ("receive", "get")], True),
    "act_shrink_p": ("antonym", [("shrink",), ("stretch", "stretch out")], True),
    "act_alter_p": ("antonym", [("take in",), ("let out",)], True),
    # ---- antonymous modifiers
    "mod_refund_p": (
        "antonym",
        [("refundable", "free-cancellation"), ("non-refundable", "no-refund")],
        True,
    ),
    "mod_tracked_p": ("antonym", [("tracked", "trackable"), ("untracked", "non-tracked")], True),
    "mod_fit_p": ("antonym", [("loose", "baggy"), ("tight", "snug")], True),
    "mod_load_p": ("antonym", [("whites", "white clothes"), ("darks", "dark clothes")], True),
    # ---- entities
    "resort_p": (
        "entity",
        [
            ("Bali",),
            ("Cancún", "Cancun"),
            ("Phuket",),
            ("Mallorca", "Majorca"),
            ("Santorini",),
            ("Zanzibar",),
        ],
        False,
    ),
    "chain_p": (
        "entity",
        [("Marriott",), ("Hilton",), ("Hyatt",), ("Holiday Inn",), ("Best Western",), ("Ibis",)],
        False,
    ),
    "land_p": (
        "entity",
        [
            ("Poland",),
            ("Portugal",),
            ("Ireland",),
            ("Sweden",),
            ("Greece",),
            ("Austria",),
            ("Belgium",),
        ],
        False,
    ),
    "fabric_p": (
        "entity",
        [("wool",), ("cotton",), ("linen",), ("cashmere",), ("mohair",), ("polyester",)],
        False,
    ),
    "garment_p": (
        "entity",
        [
            ("suit jacket", "suit coat"),
            ("wedding dress", "bridal gown"),
            ("pair of trousers", "pair of pants"),
            ("skirt",),
            ("waistcoat",),
        ],
        False,
    ),
    "sizing_p": (
        "entity",
        [
            ("EU", "European"),
            ("US", "American"),
            ("UK", "British"),
            ("Australian", "AU"),
            ("Brazilian", "BR"),
        ],
        False,
    ),
    # ---- audiences
    "guest_p": (
        "audience",
        [
            ("babies", "infants"),
            ("solo travellers", "people travelling alone"),
            ("dog owners", "guests with dogs"),
            ("large groups", "big groups"),
            ("business travellers", "corporate guests"),
        ],
        False,
    ),
    "wearer_p": (
        "audience",
        [
            ("men", "male applicants"),
            ("women", "female applicants"),
            ("recent graduates", "new grads"),
            ("software developers", "programmers"),
            ("finance professionals", "people in finance"),
        ],
        False,
    ),
    # ---- time windows
    "hour_p": (
        "time",
        [
            ("before 9 a.m.", "before nine in the morning"),
            ("after 11 p.m.", "after eleven at night"),
            ("around 3 a.m.", "at about three in the morning"),
            ("at noon", "at twelve noon"),
            ("at 4 p.m.", "at four in the afternoon"),
        ],
        False,
    ),
    "notice_p": (
        "time",
        [
            ("the day before arrival", "24 hours before check-in"),
            ("a week before arrival", "seven days before check-in"),
            ("on the day of arrival", "on the arrival date"),
            ("after checking in", "once the stay has begun"),
        ],
        False,
    ),
    "stay_p": (
        "time",
        [
            ("over Easter", "during the Easter holidays"),
            ("in the low season", "out of season"),
            ("during Carnival", "at Carnival time"),
            ("in August", "during August"),
            ("midweek", "from Monday to Thursday"),
        ],
        False,
    ),
    "arrive_p": (
        "time",
        [
            ("by tomorrow", "by the next day"),
            ("within three days", "in three days or less"),
            ("before Christmas", "ahead of Christmas"),
            ("by the end of the month", "before the month is out"),
            ("by Friday", "no later than Friday"),
        ],
        False,
    ),
    # ---- tiers
    "room_p": (
        "tier",
        [
            ("deluxe room", "deluxe double"),
            ("junior suite",),
            ("executive suite",),
            ("economy room", "budget room"),
            ("family room",),
        ],
        False,
    ),
    # ---- quantities
    "people_p": (
        "quantity",
        [
            ("a couple", "two adults"),
            ("a family of four", "two adults and two children"),
            ("three adults", "3 adults"),
            ("five people", "a group of five"),
            ("six guests", "6 guests"),
        ],
        False,
    ),
    "weight_p": (
        "quantity",
        [
            ("1 kg", "1-kilo"),
            ("2 kg", "2-kilo"),
            ("5 kg", "5-kilo"),
            ("10 kg", "10-kilo"),
            ("20 kg", "20-kilo"),
        ],
        False,
    ),
}

_FAMILIES_P = [
    # ---- lodging
    F(
        "checkin_hour_p",
        "lodging",
        (
            "Will a hotel charge me extra to {act_checkin_p} {hour_p}?",
            "Is there a fee for hotel guests who {act_checkin_p} {hour_p}?",
            "Hotel stay: do I pay more if I {act_checkin_p} {hour_p}?",
        ),
    ),
    F(
        "cancel_refund_p",
        "lodging",
        (
            "If I cancel a {mod_refund_p} hotel booking {notice_p}, do I get my money back?",
            "Will I be reimbursed for calling off a {mod_refund_p} room reservation {notice_p}?",
            "{mod_refund_p} hotel rate, cancelled {notice_p}: any refund?",
        ),
    ),
    F(
        "guest_fee_p",
        "lodging",
        (
            "Do {chain_p} hotels charge extra for {guest_p}?",
            "Is there a surcharge for {guest_p} at {chain_p}?",
            "{chain_p} policy: additional fees when booking for {guest_p}?",
        ),
    ),
    F(
        "room_capacity_p",
        "lodging",
        (
            "Can {people_p} stay in the {room_p}?",
            "Is the {room_p} big enough for {people_p}?",
            "{room_p} occupancy: does it fit {people_p}?",
        ),
    ),
    F(
        "resort_rates_p",
        "lodging",
        (
            "Are hotels in {resort_p} cheaper {stay_p}?",
            "Do room rates in {resort_p} go down {stay_p}?",
            "Accommodation prices, {resort_p}, {stay_p}: lower than usual?",
        ),
    ),
    F(
        "dog_hotels_p",
        "lodging",
        (
            "Which hotels in {resort_p} [allow|don't allow] dogs?",
            "Looking for {resort_p} stays that [accept|turn away] dogs: any names?",
            "{resort_p} accommodation where dogs are [welcome|not welcome]?",
        ),
    ),
    # ---- postal
    F(
        "mail_redirect_p",
        "postal",
        (
            "How do I {act_redirect_p} mail forwarding with the post office?",
            "What's the process to {act_redirect_p} redirecting my letters to a new address?",
            "{act_redirect_p} a postal redirection: what do I need to do?",
        ),
    ),
    F(
        "registered_id_p",
        "postal",
        (
            "Do I need ID to {act_mail_p} a registered letter?",
            "Is photo identification required when you {act_mail_p} recorded-delivery mail?",
            "{act_mail_p} a signed-for letter: must I show identification?",
        ),
    ),
    F(
        "lost_parcel_p",
        "postal",
        (
            "Can I claim compensation if a {mod_tracked_p} parcel goes missing?",
            "Lost {mod_tracked_p} package in the post: am I entitled to a payout?",
            "Is there any reimbursement when the mail service loses my {mod_tracked_p} shipment?",
        ),
    ),
    F(
        "postage_route_p",
        "postal",
        (
            "How much does it cost to post a {weight_p} parcel from {land_p} to {land_p2}?",
            "What's the postage for a {weight_p} box sent from {land_p} to {land_p2}?",
            "Shipping price, {weight_p} package, {land_p} to {land_p2}?",
        ),
    ),
    F(
        "customs_items_p",
        "postal",
        (
            "What items [can|can't] be posted to {land_p}?",
            "Which goods are [allowed|prohibited] in parcels sent to {land_p}?",
            "Things you're [permitted|not permitted] to mail to {land_p}: is there a list?",
        ),
    ),
    F(
        "arrival_window_p",
        "postal",
        (
            "If I post a card to {land_p} today, will it get there {arrive_p}?",
            "Sending a letter to {land_p} now: will it arrive {arrive_p}?",
            "Will mail sent to {land_p} today be delivered {arrive_p}?",
        ),
    ),
    # ---- clothing
    F(
        "resize_knit_p",
        "clothing",
        (
            "How do I {act_shrink_p} a {fabric_p} sweater at home?",
            "Is there a way to {act_shrink_p} my {fabric_p} jumper without ruining it?",
            "{act_shrink_p} a {fabric_p} pullover: how?",
        ),
    ),
    F(
        "alteration_p",
        "clothing",
        (
            "By how much can a tailor {act_alter_p} a {garment_p}?",
            "Is there a maximum amount a seamstress can {act_alter_p} a {garment_p}?",
            "{act_alter_p} a {garment_p}: up to how many sizes?",
        ),
    ),
    F(
        "jeans_fit_p",
        "clothing",
        (
            "I want a {mod_fit_p} fit in jeans: should I size up or down?",
            "Going for a {mod_fit_p} look with denim: order a bigger or smaller size?",
            "Which jeans size to buy if you like them {mod_fit_p}?",
        ),
    ),
    F(
        "wash_temp_p",
        "clothing",
        (
            "What temperature should I wash {mod_load_p} at?",
            "Best water temperature for a load of {mod_load_p}?",
            "Laundry: hot or cold cycle for {mod_load_p}?",
        ),
    ),
    F(
        "shoe_convert_p",
        "clothing",
        (
            "How do I convert {sizing_p} shoe sizes to {sizing_p2} sizes?",
            "Is there a rule for turning {sizing_p} shoe sizes into {sizing_p2} ones?",
            "{sizing_p} to {sizing_p2} footwear size conversion: how does it work?",
        ),
    ),
    F(
        "interview_outfit_p",
        "clothing",
        (
            "What should {wearer_p} wear to a job interview?",
            "Interview outfit ideas for {wearer_p}?",
            "How should {wearer_p} dress when meeting a potential employer?",
        ),
    ),
]


# ==== home repair, outdoors, parenting (names end with _q) ============================

_LEXICONS_Q: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_water_q": ("antonym", [("shut off", "cut"), ("restore",)], True),
    "act_paper_q": ("antonym", [("hang", "put up"), ("strip", "peel off")], True),
    "act_pitch_q": ("antonym", [("pitch", "erect"), ("dismantle", "pack away")], True),
    "act_inflate_q": ("antonym", [("inflate", "blow up"), ("deflate", "let the air out of")], True),
    "act_paci_q": ("antonym", [("introduce", "start offering"), ("phase out", "get rid of")], True),
    # ---- antonymous modifiers
    "mod_bearing_q": (
        "antonym",
        [("load-bearing", "structural"), ("non-load-bearing", "non-structural")],
        True,
    ),
    "mod_slope_q": (
        "antonym",
        [("uphill", "up steep slopes"), ("downhill", "down steep slopes")],
        True,
    ),
    "mod_salt_q": ("antonym", [("saltwater", "ocean"), ("freshwater", "lake and river")], True),
    "mod_facing_q": (
        "antonym",
        [("rear-facing", "backward-facing"), ("forward-facing", "front-facing")],
        True,
    ),
    # ---- entities
    "fixture_q": (
        "entity",
        [
            ("toilet",),
            ("kitchen sink",),
            ("washing machine", "washer"),
            ("dishwasher",),
            ("water heater", "hot water tank"),
        ],
        False,
    ),
    "wall_q": (
        "entity",
        [
            ("plaster", "lath and plaster"),
            ("drywall", "plasterboard"),
            ("brick",),
            ("cinder block", "concrete block"),
        ],
        False,
    ),
    "floor_q": (
        "entity",
        [
            ("carpet", "carpeting"),
            ("hardwood", "hardwood flooring"),
            ("laminate", "laminate flooring"),
            ("vinyl plank", "luxury vinyl plank"),
            ("ceramic tile", "tile"),
        ],
        False,
    ),
    "surface_q": (
        "entity",
        [
            ("bathtub seams", "tub joints"),
            ("window frames",),
            ("concrete cracks", "cracks in concrete"),
            ("baseboards", "skirting boards"),
            ("kitchen countertops", "kitchen counters"),
        ],
        False,
    ),
    "tool_q": (
        "entity",
        [
            ("tile saw", "wet saw"),
            ("pressure washer", "power washer"),
            ("carpet cleaner", "carpet shampooer"),
            ("floor sander",),
            ("jackhammer", "demolition hammer"),
        ],
        False,
    ),
    "finish_q": (
        "entity",
        [
            ("oil-based polyurethane", "oil-based poly"),
            ("water-based polyurethane", "water-based poly"),
            ("hardwax oil", "hard wax oil"),
            ("tung oil",),
        ],
        False,
    ),
    "cond_q": (
        "entity",
        [
            ("in strong wind", "in high winds"),
            ("in heavy rain", "in a downpour"),
            ("on snow", "on packed snow"),
            ("on sand", "on a sandy beach"),
            ("in the dark", "without daylight"),
        ],
        False,
    ),
    "gear_q": (
        "entity",
        [
            ("sleeping pad", "sleeping mat"),
            ("air mattress", "airbed"),
            ("inflatable kayak",),
            ("paddleboard", "inflatable SUP"),
        ],
        False,
    ),
    "park_q": (
        "entity",
        [
            ("Zion", "Zion National Park"),
            ("Yellowstone", "Yellowstone National Park"),
            ("Arches", "Arches National Park"),
            ("Mount Rainier", "Mount Rainier National Park"),
            ("Glacier National Park",),
        ],
        False,
    ),
    "spot_q": (
        "entity",
        [
            ("Yosemite Valley",),
            ("Glacier Point",),
            ("Half Dome",),
            ("Clouds Rest",),
            ("Tuolumne Meadows",),
        ],
        False,
    ),
    "item_q": (
        "entity",
        [
            ("a pacifier", "a dummy"),
            ("a bottle", "a feeding bottle"),
            ("a sippy cup", "a spouted cup"),
            ("a straw cup",),
        ],
        False,
    ),
    "seat_q": ("entity", [("Graco",), ("Britax",), ("Chicco",), ("Maxi-Cosi",), ("Nuna",)], False),
    "milk_q": (
        "entity",
        [
            ("breast milk", "breastmilk"),
            ("formula", "infant formula"),
            ("whole milk", "cow's milk"),
            ("oat milk",),
            ("goat's milk", "goat milk"),
        ],
        False,
    ),
    # ---- audiences
    "angler_q": (
        "audience",
        [
            ("anglers under 16", "youth anglers"),
            ("anglers over 65", "senior anglers"),
            ("state residents", "in-state residents"),
            ("out-of-state visitors", "non-resident anglers"),
            ("disabled veterans", "veterans with disabilities"),
        ],
        False,
    ),
    "kid_q": (
        "audience",
        [
            ("toddlers", "1- to 3-year-olds"),
            ("preschoolers", "3- to 5-year-olds"),
            ("grade-schoolers", "elementary school kids"),
            ("tweens", "preteens"),
            ("babies under 18 months", "infants younger than 18 months"),
        ],
        False,
    ),
    # ---- time windows
    "after_q": (
        "time",
        [
            ("after 6 hours", "after six hours"),
            ("after one day", "after 24 hours"),
            ("after three days", "after 72 hours"),
            ("after a week", "after seven days"),
        ],
        False,
    ),
    "month_q": (
        "time",
        [
            ("in March", "during March"),
            ("in July", "during July"),
            ("in October", "during October"),
            ("in December", "during December"),
        ],
        False,
    ),
    "age_q": (
        "time",
        [
            ("at 4 months", "at four months old"),
            ("at 6 months", "at six months old"),
            ("at 9 months", "at nine months old"),
            ("at 12 months", "at one year old"),
        ],
        False,
    ),
    # ---- product tiers
    "rental_q": (
        "tier",
        [
            ("4-hour rental", "half-day rental"),
            ("one-day rental", "24-hour rental"),
            ("weekly rental", "one-week rental"),
            ("four-week rental", "monthly rental"),
        ],
        False,
    ),
    # ---- quantities
    "len_q": (
        "quantity",
        [
            ("6-foot", "six-foot"),
            ("10-foot", "ten-foot"),
            ("15-foot", "fifteen-foot"),
            ("20-foot", "twenty-foot"),
        ],
        False,
    ),
}

_FAMILIES_Q = [
    # ---- homerepair
    F(
        "water_valve_q",
        "homerepair",
        (
            "How do I {act_water_q} the water supply to my {fixture_q}?",
            "Where's the little valve I use to {act_water_q} water to the {fixture_q}, and how does it work?",
            "{act_water_q} the water going to a {fixture_q}: what are the steps?",
        ),
    ),
    F(
        "wallpaper_q",
        "homerepair",
        (
            "How do I {act_paper_q} wallpaper on {wall_q} walls?",
            "What's the right way to {act_paper_q} wall coverings when my walls are {wall_q}?",
            "{wall_q} walls: how should I {act_paper_q} the paper?",
        ),
    ),
    F(
        "wall_removal_q",
        "homerepair",
        (
            "How much does it cost to remove a {len_q} {mod_bearing_q} wall?",
            "What would a contractor charge to take out a {len_q} stretch of {mod_bearing_q} wall?",
            "Ballpark price for knocking down a {mod_bearing_q} partition, {len_q} section?",
        ),
    ),
    F(
        "floor_swap_q",
        "homerepair",
        (
            "What's involved in replacing {floor_q} with {floor_q2}?",
            "I want to rip out my {floor_q} and put in {floor_q2}; how big a job is that?",
            "Going from {floor_q} to {floor_q2} in one room: what does the work involve?",
        ),
    ),
    F(
        "caulk_q",
        "homerepair",
        (
            "Which kinds of caulk [are|aren't] suitable for {surface_q}?",
            "What sealant types [should|shouldn't] I use on {surface_q}?",
            "Caulking {surface_q}: which products [work|don't work]?",
        ),
    ),
    F(
        "tool_rental_q",
        "homerepair",
        (
            "How much is a {rental_q} of a {tool_q}?",
            "What do hardware stores charge for a {tool_q} on a {rental_q}?",
            "Renting a {tool_q}, {rental_q}: typical price?",
        ),
    ),
    F(
        "floor_cure_q",
        "homerepair",
        (
            "Is it OK to put furniture back on a floor finished with {finish_q} {after_q}?",
            "Can the sofa and tables go back on boards I just coated with {finish_q} {after_q}?",
            "Refinished my floor using {finish_q}: is moving furniture back {after_q} too soon?",
        ),
    ),
    # ---- outdoors
    F(
        "tent_q",
        "outdoors",
        (
            "How do I {act_pitch_q} a tent {cond_q}?",
            "Any tricks for when you have to {act_pitch_q} your shelter {cond_q}?",
            "Best method to {act_pitch_q} a backpacking tent {cond_q}?",
        ),
    ),
    F(
        "inflate_q",
        "outdoors",
        (
            "What's the fastest way to {act_inflate_q} my {gear_q}?",
            "How can I {act_inflate_q} my {gear_q} quickly at the campsite?",
            "Need to {act_inflate_q} my {gear_q} in a hurry: tips?",
        ),
    ),
    F(
        "poles_q",
        "outdoors",
        (
            "How long should my trekking poles be for hiking {mod_slope_q}?",
            "When I'm walking {mod_slope_q}, do I set my hiking sticks shorter or longer?",
            "Right pole height for going {mod_slope_q} on a trail?",
        ),
    ),
    F(
        "park_entry_q",
        "outdoors",
        (
            "Is a reservation required to get into {park_q} {month_q}?",
            "Do I have to book an entry slot for {park_q} if I visit {month_q}?",
            "{park_q} {month_q}: timed-entry permit needed?",
        ),
    ),
    F(
        "trail_time_q",
        "outdoors",
        (
            "How long does the hike from {spot_q} to {spot_q2} take?",
            "Roughly how many hours should I budget to walk from {spot_q} over to {spot_q2}?",
            "{spot_q} to {spot_q2} on foot: typical duration?",
        ),
    ),
    F(
        "fishing_license_q",
        "outdoors",
        (
            "Do {angler_q} need a license to go {mod_salt_q} fishing?",
            "Is a permit required for {angler_q} who want to do some {mod_salt_q} fishing?",
            "{mod_salt_q} fishing by {angler_q}: license needed?",
        ),
    ),
    # ---- parenting
    F(
        "pacifier_q",
        "parenting",
        (
            "At what age should I {act_paci_q} {item_q} for my baby?",
            "When's the right time to {act_paci_q} {item_q} for an infant?",
            "How old should my little one be when we {act_paci_q} {item_q}?",
        ),
    ),
    F(
        "car_seat_q",
        "parenting",
        (
            "What's the weight limit for a {seat_q} car seat used {mod_facing_q}?",
            "How heavy can my kid get before outgrowing a {seat_q} seat in the {mod_facing_q} position?",
            "{seat_q} car seat, {mod_facing_q} mode: max child weight?",
        ),
    ),
    F(
        "screen_time_q",
        "parenting",
        (
            "How much screen time is appropriate for {kid_q}?",
            "What's a healthy daily limit on TV and tablets for {kid_q}?",
            "{kid_q} and devices: how many hours a day is OK?",
        ),
    ),
    F(
        "baby_food_q",
        "parenting",
        (
            "Which foods [should|shouldn't] I give my baby {age_q}?",
            "What can my little one [|not ]eat {age_q}?",
            "Feeding an infant {age_q}: which foods [are fine|are off-limits]?",
        ),
    ),
    F(
        "milk_switch_q",
        "parenting",
        (
            "How do I switch my child from {milk_q} to {milk_q2}?",
            "What's the best way to transition a little one off {milk_q} and onto {milk_q2}?",
            "Moving my kid from {milk_q} over to {milk_q2}: tips?",
        ),
    ),
]


# ==== media, arts, charity, science (names end with _r) ===============================

_LEXICONS_R: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_show_r": ("antonym", [("show", "display", "bring up"), ("hide", "get rid of")], True),
    "act_warm_r": ("antonym", [("warm up",), ("cool down",)], True),
    "act_cast_r": ("antonym", [("cast on",), ("bind off", "cast off")], True),
    "act_recur_r": ("antonym", [("start", "begin"), ("stop", "end")], True),
    "act_absorb_r": ("antonym", [("absorb", "take in"), ("emit", "give off")], True),
    # ---- antonymous modifiers
    "mod_dub_r": ("antonym", [("subtitled", "subbed"), ("dubbed",)], True),
    "mod_matte_r": ("antonym", [("matte", "flat"), ("glossy", "high-gloss", "shiny")], True),
    "mod_restricted_r": (
        "antonym",
        [("restricted", "earmarked"), ("unrestricted", "general-purpose")],
        True,
    ),
    "mod_acid_r": ("antonym", [("acidic",), ("alkaline",)], True),
    # ---- entities
    "tv_r": (
        "entity",
        [
            ("Roku", "Roku player"),
            ("Apple TV",),
            ("Fire TV Stick", "Fire Stick"),
            ("Chromecast", "Google Chromecast"),
            ("Nvidia Shield", "NVIDIA Shield TV"),
        ],
        False,
    ),
    "show_r": (
        "entity",
        [
            ("Attack on Titan",),
            ("Squid Game",),
            ("Money Heist",),
            ("Spirited Away",),
            ("Demon Slayer",),
            ("Parasite",),
        ],
        False,
    ),
    "music_r": (
        "entity",
        [
            ("Spotify",),
            ("Apple Music",),
            ("YouTube Music",),
            ("Tidal",),
            ("Deezer",),
            ("Amazon Music",),
        ],
        False,
    ),
    "medium_r": (
        "entity",
        [("acrylic",), ("oil",), ("gouache",), ("watercolor", "watercolour"), ("egg tempera",)],
        False,
    ),
    "museum_r": (
        "entity",
        [
            ("the Louvre", "the Louvre Museum"),
            ("the Prado", "the Prado Museum"),
            ("the Uffizi", "the Uffizi Gallery"),
            ("the Rijksmuseum",),
            ("the Met", "the Metropolitan Museum of Art"),
            ("Tate Modern",),
        ],
        False,
    ),
    "knit_r": (
        "entity",
        [
            ("rib", "ribbing"),
            ("garter stitch",),
            ("stockinette", "stocking stitch"),
            ("seed stitch", "moss stitch"),
        ],
        False,
    ),
    "charity_r": (
        "entity",
        [
            ("UNICEF",),
            ("Doctors Without Borders", "MSF"),
            ("Save the Children",),
            ("the Red Cross",),
            ("Amnesty International", "Amnesty"),
            ("the WWF", "the World Wildlife Fund"),
        ],
        False,
    ),
    "shop_r": (
        "entity",
        [
            ("Goodwill",),
            ("the Salvation Army",),
            ("St Vincent de Paul", "Vinnies"),
            ("Habitat for Humanity",),
            ("the British Heart Foundation", "the BHF"),
        ],
        False,
    ),
    "gas_r": (
        "entity",
        [
            ("carbon dioxide", "CO2"),
            ("methane", "CH4"),
            ("water vapor", "water vapour"),
            ("nitrous oxide", "N2O"),
            ("ozone", "O3"),
        ],
        False,
    ),
    "planet_r": (
        "entity",
        [("Venus",), ("Mars",), ("Jupiter",), ("Saturn",), ("Mercury",)],
        False,
    ),
    "chem_r": (
        "entity",
        [
            ("bleach", "chlorine bleach"),
            ("ammonia",),
            ("vinegar", "white vinegar"),
            ("hydrogen peroxide",),
            ("rubbing alcohol", "isopropyl alcohol"),
        ],
        False,
    ),
    # ---- audiences
    "visitor_r": (
        "audience",
        [
            ("art students", "fine-art students"),
            ("under-18s", "visitors under 18"),
            ("EU residents", "residents of the EU"),
            ("disabled visitors", "visitors with disabilities"),
            ("unemployed visitors", "people on unemployment benefits"),
        ],
        False,
    ),
    "volunteer_r": (
        "audience",
        [
            ("high schoolers", "high school students"),
            ("under-16s", "kids under 16"),
            ("corporate groups", "company teams"),
            ("families with young children", "parents with small kids"),
        ],
        False,
    ),
    # ---- time windows
    "leaving_r": (
        "time",
        [
            ("tomorrow",),
            ("by Friday", "before Friday"),
            ("at the end of the month", "when the month ends"),
            ("within the next 48 hours", "in the next two days"),
            ("next weekend",),
        ],
        False,
    ),
    "sky_r": (
        "time",
        [
            ("just before dawn", "in the pre-dawn hours"),
            ("right after dusk", "shortly after sunset"),
            ("around 2 a.m.", "at about two in the morning"),
            ("during a full moon", "when the moon is full"),
            ("in broad daylight", "in the middle of the day"),
        ],
        False,
    ),
    # ---- tiers
    "news_tier_r": (
        "tier",
        [
            ("digital-only subscription", "digital-only plan"),
            ("print-and-digital subscription", "print plus digital plan"),
            ("Sunday-only subscription", "Sunday print plan"),
            ("news-only subscription", "basic news plan"),
        ],
        False,
    ),
    # ---- quantities
    "canvas_r": (
        "quantity",
        [
            ("11 by 14 inches", "11x14 inches"),
            ("16 by 20 inches", "16x20 inches"),
            ("24 by 36 inches", "24x36 inches"),
            ("36 by 48 inches", "36x48 inches"),
            ("48 by 60 inches", "48x60 inches"),
        ],
        False,
    ),
}

_FAMILIES_R = [
    # ---- media
    F(
        "subtitles_r",
        "media",
        (
            "How do I {act_show_r} subtitles on my {tv_r}?",
            "Is there a way to {act_show_r} captions when watching through my {tv_r}?",
            "Subtitles on my {tv_r}: how do I {act_show_r} them?",
        ),
    ),
    F(
        "dub_version_r",
        "media",
        (
            "Where can I watch the {mod_dub_r} version of {show_r}?",
            "Which streaming platform carries {show_r} {mod_dub_r}?",
            "Looking for {show_r} {mod_dub_r} online: which service has it?",
        ),
    ),
    F(
        "playlist_move_r",
        "media",
        (
            "How do I move my playlists from {music_r} to {music_r2}?",
            "What's the easiest way to transfer a music library off {music_r} and onto {music_r2}?",
            "Switching from {music_r} to {music_r2}, how do I bring my saved songs along?",
        ),
    ),
    F(
        "news_extras_r",
        "media",
        (
            "Does a New York Times {news_tier_r} include the crossword and the article archive?",
            "If I have the NYT {news_tier_r}, can I play the crossword and read old stories?",
            "New York Times {news_tier_r}: are puzzles and past articles part of it?",
        ),
    ),
    F(
        "leaving_netflix_r",
        "media",
        (
            "Which movies are leaving Netflix {leaving_r}?",
            "What films get removed from Netflix {leaving_r}?",
            "Netflix titles disappearing {leaving_r}: full list?",
        ),
    ),
    # ---- arts
    F(
        "colour_temp_r",
        "arts",
        (
            "How do I {act_warm_r} the colours in an oil painting?",
            "Tips to {act_warm_r} the colour temperature of a finished oil canvas?",
            "{act_warm_r} the palette of an oil painting: what works?",
        ),
    ),
    F(
        "varnish_finish_r",
        "arts",
        (
            "How do I get a {mod_matte_r} finish on my {medium_r} painting?",
            "Which varnish gives {medium_r} artwork a {mod_matte_r} look?",
            "{mod_matte_r} final coat for {medium_r} paintings: what should I use?",
        ),
    ),
    F(
        "museum_free_r",
        "arts",
        (
            "Is admission to {museum_r} free for {visitor_r}?",
            "Do {visitor_r} get in without paying at {museum_r}?",
            "Tickets to {museum_r} for {visitor_r}: are they free?",
        ),
    ),
    F(
        "knit_edge_r",
        "arts",
        (
            "How do I {act_cast_r} in {knit_r} when knitting?",
            "What's the neatest way to {act_cast_r} for a {knit_r} pattern?",
            "{act_cast_r} for a {knit_r} project: best method?",
        ),
    ),
    F(
        "canvas_paint_r",
        "arts",
        (
            "How much acrylic paint do I need to cover a canvas measuring {canvas_r}?",
            "I'm painting a canvas that's {canvas_r}; roughly how many tubes of acrylic will it take?",
            "Acrylic needed for a canvas of {canvas_r}: how much?",
        ),
    ),
    # ---- charity
    F(
        "monthly_gift_r",
        "charity",
        (
            "How do I {act_recur_r} a monthly donation to {charity_r}?",
            "What's the process to {act_recur_r} my recurring gift to {charity_r}?",
            "{act_recur_r} a regular monthly contribution to {charity_r}: how?",
        ),
    ),
    F(
        "donate_items_r",
        "charity",
        (
            "What [can|can't] I donate to {shop_r}?",
            "Which items [are|aren't] accepted as donations by {shop_r}?",
            "Things {shop_r} [will|won't] take as donations?",
        ),
    ),
    F(
        "shelter_volunteer_r",
        "charity",
        (
            "What volunteer roles at an animal shelter are open to {volunteer_r}?",
            "Which tasks can {volunteer_r} take on when volunteering at a pet rescue?",
            "Animal shelter volunteering for {volunteer_r}: what jobs are available?",
        ),
    ),
    F(
        "restricted_funds_r",
        "charity",
        (
            "Can a nonprofit use {mod_restricted_r} donations to pay staff salaries?",
            "Is a charity allowed to cover employee wages out of {mod_restricted_r} funds?",
            "{mod_restricted_r} gifts and paying staff at a nonprofit: permitted?",
        ),
    ),
    # ---- science
    F(
        "infrared_r",
        "science",
        (
            "Why does {gas_r} {act_absorb_r} infrared radiation?",
            "What makes {gas_r} molecules {act_absorb_r} heat radiation?",
            "How is {gas_r} able to {act_absorb_r} infrared light?",
        ),
    ),
    F(
        "ph_household_r",
        "science",
        (
            "Which common household substances are {mod_acid_r}?",
            "Examples of {mod_acid_r} things found around the house?",
            "What everyday products at home have an {mod_acid_r} pH?",
        ),
    ),
    F(
        "naked_eye_r",
        "science",
        (
            "Is {planet_r} visible to the naked eye {sky_r}?",
            "Can I spot {planet_r} without a telescope {sky_r}?",
            "{planet_r} {sky_r}: can you see it unaided?",
        ),
    ),
    F(
        "chem_mix_r",
        "science",
        (
            "What [can|can't] I safely combine with {chem_r} when cleaning?",
            "Which cleaning products [can|must never] be mixed with {chem_r}?",
            "Household chemicals that [are OK|are not OK] to combine with {chem_r}?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_P, **_LEXICONS_Q, **_LEXICONS_R}
FAMILIES = _FAMILIES_P + _FAMILIES_Q + _FAMILIES_R
