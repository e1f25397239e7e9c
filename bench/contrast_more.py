"""Training families added to bench/contrast_data.py's on 2026-12-06 (written then, before any
training on them): 137 families in new domains, with 145 new lexicons.

Why: the verifier learnt the 35 first training families' wording, and what got through on
held-out data was word pairs and phrasings it had not seen (opposite verbs and modifiers, an
audience, a time window, a tier, a transfer's direction). These families bring more of each:
new antonymous verb and modifier pairs (``act_*``/``mod_*``), audiences, time windows, tiers,
quantities and named parties to swap, and phrasings that share few words. None is in a held-out
domain or on a held-out family's topic (bench/contrast_data.py's ``HELDOUT_*``; checked when the
rows are written). They are written to ``contrast_more_train.jsonl`` and
``multiturn_more_train.jsonl`` (seed 13), beside the first files, which stay as they were.

Lexicon and family names end with the letter of the part they come from (``_a``, ``_b``,
``_c``): one per group of domains below.
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== software, devices, gaming, photography, networking (names end with _a) ==========

_LEXICONS_A: dict[str, Lexicon] = {
    # ---- antonymous verbs
    "act_grant_a": ("antonym", [("grant", "give"), ("revoke", "take away")], True),
    "act_pair_a": ("antonym", [("pair",), ("unpair", "forget")], True),
    "act_mute_a": ("antonym", [("mute", "silence"), ("unmute",)], True),
    "act_pause_a": ("antonym", [("pause",), ("resume",)], True),
    "act_bright_a": ("antonym", [("brighten", "lighten"), ("darken",)], True),
    "act_comment_a": ("antonym", [("comment out",), ("uncomment",)], True),
    "act_login_a": ("antonym", [("sign in to", "log in to"), ("sign out of", "log out of")], True),
    "act_block_a": ("antonym", [("block",), ("unblock",)], True),
    "act_update_a": ("antonym", [("update", "upgrade"), ("downgrade", "roll back")], True),
    "act_allow_a": ("antonym", [("allow", "permit"), ("block", "deny")], True),
    "act_archive_a": ("antonym", [("archive",), ("unarchive",)], True),
    # ---- antonymous modifiers
    "mod_local_a": ("antonym", [("local",), ("remote",)], True),
    "mod_view_a": ("antonym", [("view-only", "read-only"), ("edit", "editing")], True),
    "mod_color_a": ("antonym", [("color", "full color"), ("black and white", "grayscale")], True),
    "mod_plugged_a": (
        "antonym",
        [("plugged in", "on the charger"), ("unplugged", "running on battery")],
        True,
    ),
    "mod_dof_a": ("antonym", [("shallow",), ("deep",)], True),
    "mod_lens_a": ("antonym", [("wide-angle",), ("telephoto",)], True),
    "mod_orient_a": ("antonym", [("portrait", "vertical"), ("landscape", "horizontal")], True),
    "mod_motion_a": ("antonym", [("slow-motion", "slow-mo"), ("time-lapse", "fast-motion")], True),
    "mod_wired_a": ("antonym", [("wired", "Ethernet"), ("wireless", "Wi-Fi")], True),
    "mod_inbound_a": ("antonym", [("incoming", "inbound"), ("outgoing", "outbound")], True),
    "mod_static_a": ("antonym", [("static", "fixed"), ("dynamic",)], True),
    "mod_asc_a": ("antonym", [("ascending", "increasing"), ("descending", "decreasing")], True),
    # ---- entities
    "os_a": (
        "entity",
        [("Windows",), ("macOS", "Mac OS"), ("Linux",), ("ChromeOS", "Chrome OS")],
        False,
    ),
    "cloud_a": (
        "entity",
        [
            ("Google Drive",),
            ("Dropbox",),
            ("OneDrive", "Microsoft OneDrive"),
            ("iCloud Drive",),
            ("Box",),
        ],
        False,
    ),
    "browser_a": (
        "entity",
        [("Chrome", "Google Chrome"), ("Firefox",), ("Safari",), ("Edge", "Microsoft Edge")],
        False,
    ),
    "phone_a": (
        "entity",
        [
            ("iPhone",),
            ("Samsung Galaxy", "Galaxy phone"),
            ("Google Pixel", "Pixel phone"),
            ("OnePlus", "OnePlus phone"),
            ("Xiaomi", "Xiaomi phone"),
        ],
        False,
    ),
    "laptop_a": (
        "entity",
        [
            ("MacBook", "Apple MacBook"),
            ("Dell XPS",),
            ("ThinkPad", "Lenovo ThinkPad"),
            ("Surface Laptop",),
            ("HP Spectre",),
        ],
        False,
    ),
    "printer_a": ("entity", [("HP",), ("Canon",), ("Epson",), ("Brother",)], False),
    "assistant_a": (
        "entity",
        [("Alexa", "Amazon Alexa"), ("Google Assistant",), ("Siri",), ("Bixby",)],
        False,
    ),
    "console_a": (
        "entity",
        [
            ("PS5", "PlayStation 5"),
            ("Xbox Series X",),
            ("Nintendo Switch", "Switch"),
            ("Steam Deck",),
            ("PS4", "PlayStation 4"),
        ],
        False,
    ),
    "launcher_a": (
        "entity",
        [
            ("Steam",),
            ("the Epic Games Launcher",),
            ("Battle.net",),
            ("the EA app",),
            ("the Xbox app",),
        ],
        False,
    ),
    "camera_a": (
        "entity",
        [
            ("Canon EOS R6", "Canon R6"),
            ("Sony A7 IV", "Sony Alpha 7 IV"),
            ("Nikon Z6",),
            ("Fujifilm X-T5", "Fuji X-T5"),
            ("Panasonic Lumix S5", "Lumix S5"),
        ],
        False,
    ),
    "subject_a": (
        "entity",
        [
            ("landscapes",),
            ("portraits",),
            ("wildlife",),
            ("architecture", "buildings"),
            ("the night sky", "stars"),
            ("street scenes",),
        ],
        False,
    ),
    "social_a": ("entity", [("Instagram",), ("Facebook",), ("LinkedIn",), ("Pinterest",)], False),
    "img_a": ("entity", [("HEIC",), ("JPG", "JPEG"), ("PNG",), ("WebP",), ("TIFF",)], False),
    "editor_a": (
        "entity",
        [
            ("Premiere Pro", "Adobe Premiere Pro"),
            ("DaVinci Resolve",),
            ("Final Cut Pro",),
            ("iMovie",),
            ("CapCut",),
        ],
        False,
    ),
    "photoapp_a": (
        "entity",
        [
            ("Lightroom", "Adobe Lightroom"),
            ("Photoshop", "Adobe Photoshop"),
            ("GIMP",),
            ("Snapseed",),
            ("Affinity Photo",),
        ],
        False,
    ),
    "router_a": (
        "entity",
        [("Netgear",), ("TP-Link",), ("Linksys",), ("ASUS", "Asus"), ("Eero",)],
        False,
    ),
    "ide_a": (
        "entity",
        [
            ("VS Code", "Visual Studio Code"),
            ("IntelliJ", "IntelliJ IDEA"),
            ("PyCharm",),
            ("Vim",),
            ("Sublime Text",),
        ],
        False,
    ),
    "branch_a": (
        "entity",
        [("main",), ("develop",), ("staging",), ("release",), ("hotfix",)],
        False,
    ),
    # ---- audience
    "aud_a": (
        "audience",
        [
            ("kids", "children"),
            ("teenagers", "teens"),
            ("seniors", "older people"),
            ("beginners", "newcomers"),
            ("families",),
            ("students", "college students"),
        ],
        False,
    ),
    # ---- time windows
    "time_a": (
        "time",
        [
            ("every day", "daily"),
            ("every week", "weekly"),
            ("every month", "monthly"),
            ("every hour", "hourly"),
        ],
        False,
    ),
    "range_a": (
        "time",
        [
            ("in the last hour", "in the past hour"),
            ("in the last 24 hours", "in the past day"),
            ("in the last 7 days", "in the past week"),
            ("in the last 4 weeks", "in the past month"),
        ],
        False,
    ),
    "at_a": (
        "time",
        [
            ("at sunset",),
            ("at sunrise",),
            ("at midnight",),
            ("at 7 a.m.", "at seven in the morning"),
            ("at 10 p.m.", "at ten at night"),
        ],
        False,
    ),
    "when_a": (
        "time",
        [("this week",), ("next week",), ("this month",), ("next month", "in the coming month")],
        False,
    ),
    # ---- product tiers
    "win_a": (
        "tier",
        [
            ("Windows 11 Home",),
            ("Windows 11 Pro",),
            ("Windows 11 Enterprise",),
            ("Windows 11 Education",),
        ],
        False,
    ),
    "gp_a": (
        "tier",
        [("Game Pass Core",), ("Game Pass Standard",), ("Game Pass Ultimate",), ("PC Game Pass",)],
        False,
    ),
    "psplus_a": (
        "tier",
        [
            ("PlayStation Plus Essential", "PS Plus Essential"),
            ("PlayStation Plus Extra", "PS Plus Extra"),
            ("PlayStation Plus Premium", "PS Plus Premium"),
            ("PlayStation Plus Deluxe", "PS Plus Deluxe"),
        ],
        False,
    ),
    # ---- quantities
    "price_a": (
        "quantity",
        [
            ("$500", "500 dollars"),
            ("$800", "800 dollars"),
            ("$1,000", "1000 dollars"),
            ("$1,500", "1500 dollars"),
            ("$2,000", "2000 dollars"),
        ],
        False,
    ),
    "fps_a": (
        "quantity",
        [
            ("30 fps", "30 frames per second"),
            ("60 fps", "60 frames per second"),
            ("120 fps", "120 frames per second"),
            ("240 fps", "240 frames per second"),
        ],
        False,
    ),
    "res_a": (
        "quantity",
        [("720p",), ("1080p", "Full HD"), ("1440p", "QHD"), ("4K", "2160p"), ("8K",)],
        False,
    ),
}

_FAMILIES_A = [
    # ---- software: code
    F(
        "git_branch_a",
        "software",
        (
            "How do I delete a {mod_local_a} branch in git?",
            "What's the command to get rid of a {mod_local_a} git branch?",
            "Removing a {mod_local_a} branch with git: syntax?",
        ),
    ),
    F(
        "git_merge_a",
        "software",
        (
            "How do I merge {branch_a} into {branch_a2} in git?",
            "What's the way to bring the changes from {branch_a} over to the {branch_a2} branch?",
            "Combining {branch_a} into {branch_a2}: which git steps?",
        ),
    ),
    F(
        "comment_a",
        "software",
        (
            "How do I {act_comment_a} several lines at once in {ide_a}?",
            "Is there a shortcut in {ide_a} to {act_comment_a} a whole block of code?",
            "{ide_a} keyboard trick to {act_comment_a} multiple lines?",
        ),
    ),
    F(
        "sort_a",
        "software",
        (
            "How do I sort a list in {mod_asc_a} order in {lang}?",
            "What's the {lang} way to put an array in {mod_asc_a} order?",
            "{lang}: sorting values into {mod_asc_a} order, what's the syntax?",
        ),
    ),
    # ---- software: apps, accounts, settings, cloud
    F(
        "perm_a",
        "software",
        (
            "How do I {act_grant_a} camera access for an app on my {phone_a}?",
            "On my {phone_a}, where can I {act_grant_a} an application's permission to use the camera?",
            "Which {phone_a} setting lets me {act_grant_a} camera access for a specific app?",
        ),
    ),
    F(
        "share_view_a",
        "software",
        (
            "How do I share a {cloud_a} folder with {mod_view_a} access?",
            "Is there a way to give someone {mod_view_a} rights to one of my {cloud_a} folders?",
            "Sharing a {cloud_a} folder with {mod_view_a} permissions: how?",
        ),
    ),
    F(
        "cloud_storage_a",
        "software",
        (
            "How much storage comes with the {cloud_a} {tier}?",
            "What's the space limit on {cloud_a}'s {tier}?",
            "Storage on the {tier} of {cloud_a}: how many GB?",
        ),
    ),
    F(
        "login_a",
        "software",
        (
            "Why can't I {act_login_a} my Google account in {browser_a}?",
            "What stops {browser_a} from letting me {act_login_a} Google?",
            "{browser_a} won't let me {act_login_a} my Google profile: why?",
        ),
    ),
    F(
        "history_a",
        "software",
        (
            "How do I clear only the {browser_a} history for sites I visited {range_a}?",
            "Is there a way to erase just what I looked at {range_a} from {browser_a}'s history?",
            "Delete {browser_a} browsing records of pages opened {range_a}: steps?",
        ),
    ),
    F(
        "backup_sched_a",
        "software",
        (
            "How do I set {os_a} to back up my files automatically {time_a}?",
            "Is there a way to schedule a backup on {os_a} that runs {time_a}?",
            "Automatic file backups {time_a} on {os_a}: how to set up?",
        ),
    ),
    F(
        "preview_neg_a",
        "software",
        (
            "Which file types [can|can't] {cloud_a} preview in the browser?",
            "What kinds of files [does|doesn't] {cloud_a} show a preview for?",
            "Previews in {cloud_a}: which formats [are supported|aren't supported]?",
        ),
    ),
    F(
        "archive_chat_a",
        "software",
        (
            "How do I {act_archive_a} a chat in WhatsApp on my {phone_a}?",
            "Where's the option to {act_archive_a} a WhatsApp conversation on my {phone_a}?",
            "WhatsApp on my {phone_a}: {act_archive_a} a thread, how?",
        ),
    ),
    F(
        "remote_desk_a",
        "software",
        (
            "How do I control a {os_a} computer remotely from a {os_a2} machine?",
            "What's the best remote desktop tool to reach a {os_a} system from {os_a2}?",
            "Remote access: {os_a2} laptop driving a {os_a} desktop, which app?",
        ),
    ),
    F(
        "win_price_a",
        "software",
        (
            "How much does a {win_a} license cost?",
            "What's the price of a product key for {win_a}?",
            "Buying {win_a}: what will I pay?",
        ),
    ),
    # ---- devices
    F(
        "block_number_a",
        "devices",
        (
            "How do I {act_block_a} a phone number on my {phone_a}?",
            "What are the steps to {act_block_a} a caller on my {phone_a}?",
            "{act_block_a} a contact, {phone_a}: where's the setting?",
        ),
    ),
    F(
        "pair_a",
        "devices",
        (
            "How do I {act_pair_a} Bluetooth headphones on my {phone_a}?",
            "What are the steps to {act_pair_a} wireless earbuds on my {phone_a}?",
            "Bluetooth headset on my {phone_a}: how do I {act_pair_a} it?",
        ),
    ),
    F(
        "print_color_a",
        "devices",
        (
            "How do I print in {mod_color_a} on my {printer_a} printer?",
            "Where's the setting for {mod_color_a} printing on {printer_a} printers?",
            "{printer_a} printer, {mod_color_a} output only: how?",
        ),
    ),
    F(
        "duplex_neg_a",
        "devices",
        (
            "Why [does|doesn't] my {printer_a} printer print on both sides of the page?",
            "What makes my {printer_a} [|not ]print double-sided?",
            "{printer_a} printer [printing|not printing] duplex: why?",
        ),
    ),
    F(
        "plugged_a",
        "devices",
        (
            "Is it bad to leave my {laptop_a} {mod_plugged_a} all the time?",
            "Does keeping my {laptop_a} {mod_plugged_a} constantly wear out the battery?",
            "{laptop_a} {mod_plugged_a} 24/7: harmful for battery health?",
        ),
    ),
    F(
        "laptop_aud_a",
        "devices",
        (
            "What's the best laptop for {aud_a} under {price_a}?",
            "Which notebook would you recommend to {aud_a} with a budget of {price_a}?",
            "Laptop picks for {aud_a}, {price_a} max?",
        ),
    ),
    F(
        "assistant_aud_a",
        "devices",
        (
            "How should I set up {assistant_a} for {aud_a}?",
            "What {assistant_a} settings make sense for {aud_a}?",
            "Configuring {assistant_a} to be used by {aud_a}: tips?",
        ),
    ),
    F(
        "lights_a",
        "devices",
        (
            "How can I get {assistant_a} to switch off the lights {at_a} automatically?",
            "What's the routine setup so {assistant_a} turns my lamps off {at_a}?",
            "Lights off {at_a} every day with {assistant_a}: how?",
        ),
    ),
    F(
        "speakers_neg_a",
        "devices",
        (
            "Which smart speakers [work|don't work] with {assistant_a}?",
            "What speaker brands [support|don't support] {assistant_a}?",
            "{assistant_a} and smart speakers: which ones are [compatible|incompatible]?",
        ),
    ),
    F(
        "data_usage_a",
        "devices",
        (
            "How can I see how much mobile data I used {range_a} on my {phone_a}?",
            "Where does my {phone_a} show cellular data consumption {range_a}?",
            "Checking the data my {phone_a} burned through {range_a}: where?",
        ),
    ),
    F(
        "password_aud_a",
        "devices",
        (
            "Which password manager is easiest for {aud_a} to use?",
            "What's a simple password vault you'd recommend to {aud_a}?",
            "Most user-friendly app for storing logins, for {aud_a}?",
        ),
    ),
    # ---- gaming
    F(
        "gp_leaving_a",
        "gaming",
        (
            "Which games are being removed from {gp_a} {when_a}?",
            "What titles are leaving {gp_a} {when_a}?",
            "{gp_a} departures {when_a}: which games?",
        ),
    ),
    F(
        "psplus_a",
        "gaming",
        (
            "Is {psplus_a} worth it for {aud_a}?",
            "Would you recommend a {psplus_a} subscription to {aud_a}?",
            "{aud_a} and {psplus_a}: good value?",
        ),
    ),
    F(
        "controller_a",
        "gaming",
        (
            "Can I use my {console_a} controller on the {console_a2}?",
            "Does the {console_a} gamepad work when plugged into the {console_a2}?",
            "{console_a} pad connected to the {console_a2}: supported?",
        ),
    ),
    F(
        "console_aud_a",
        "gaming",
        (
            "Which {console_a} games are [|not ]suitable for {aud_a}?",
            "What {console_a} titles [would|wouldn't] you let {aud_a} play?",
            "{console_a} games [appropriate|inappropriate] for {aud_a}: which ones?",
        ),
    ),
    F(
        "fps_a",
        "gaming",
        (
            "Can the {console_a} run games at {fps_a}?",
            "Does the {console_a} support gameplay at {fps_a}?",
            "{fps_a} on the {console_a}: possible?",
        ),
    ),
    F(
        "mute_a",
        "gaming",
        (
            "How do I {act_mute_a} another player in voice chat on {console_a}?",
            "Is there a way to {act_mute_a} someone in {console_a} party chat?",
            "{console_a} voice chat: {act_mute_a} a specific person, how?",
        ),
    ),
    F(
        "pause_dl_a",
        "gaming",
        (
            "How do I {act_pause_a} a game download in {launcher_a}?",
            "Is there a way to {act_pause_a} downloading a game on {launcher_a}?",
            "In {launcher_a}, how can I {act_pause_a} an update that's downloading?",
        ),
    ),
    F(
        "steam_share_a",
        "gaming",
        (
            "Can {person} play games from {person2}'s Steam library through Family Sharing?",
            "Is {person} able to access {person2}'s Steam games via library sharing?",
            "Steam Family Sharing, {person} borrowing {person2}'s games: possible?",
        ),
    ),
    F(
        "offline_neg_a",
        "gaming",
        (
            "Which {console_a} games [need|don't need] an internet connection to play?",
            "What {console_a} titles [require|don't require] being online?",
            "{console_a} games [that only work online|playable without internet]: which ones?",
        ),
    ),
    # ---- photo and video
    F(
        "dof_a",
        "photo",
        (
            "How do I get a {mod_dof_a} depth of field with my {camera_a}?",
            "What settings give {mod_dof_a} focus depth on the {camera_a}?",
            "{camera_a}: {mod_dof_a} DOF, which aperture?",
        ),
    ),
    F(
        "lens_a",
        "photo",
        (
            "What's the best {mod_lens_a} lens for {subject_a}?",
            "Which {mod_lens_a} glass would you pick for shooting {subject_a}?",
            "Photographing {subject_a} with a {mod_lens_a} lens: recommendations?",
        ),
    ),
    F(
        "motion_a",
        "photo",
        (
            "How do I record {mod_motion_a} video on my {phone_a}?",
            "Where's the {mod_motion_a} mode in the {phone_a} camera app?",
            "Shooting {mod_motion_a} clips with my {phone_a}: how?",
        ),
    ),
    F(
        "convert_img_a",
        "photo",
        (
            "How do I convert {img_a} images to {img_a2}?",
            "What's the easiest way to turn {img_a} files into {img_a2}?",
            "{img_a} to {img_a2} conversion: best tool?",
        ),
    ),
    F(
        "export_res_a",
        "photo",
        (
            "How do I export a video in {res_a} from {editor_a}?",
            "What are the {editor_a} render settings for {res_a} output?",
            "Saving my {editor_a} project as {res_a} video: steps?",
        ),
    ),
    F(
        "bright_sky_a",
        "photo",
        (
            "How do I {act_bright_a} just the sky in {photoapp_a}?",
            "What's the way to {act_bright_a} only part of a picture, like the sky, using {photoapp_a}?",
            "{photoapp_a}: {act_bright_a} the sky without touching the rest?",
        ),
    ),
    F(
        "stab_neg_a",
        "photo",
        (
            "Which lenses for the {camera_a} [have|don't have] image stabilization?",
            "What {camera_a} lenses [come with|lack] built-in stabilization?",
            "{camera_a} glass [with|without] optical IS: which models?",
        ),
    ),
    F(
        "camera_aud_a",
        "photo",
        (
            "What's a good camera for {aud_a} who want to shoot {subject_a}?",
            "Which camera would you suggest to {aud_a} interested in photographing {subject_a}?",
            "Buying a camera for {aud_a} to photograph {subject_a}: which one?",
        ),
    ),
    F(
        "orient_a",
        "photo",
        (
            "What aspect ratio should I use for {mod_orient_a} photos on {social_a}?",
            "Which image size works best for a {mod_orient_a} picture posted to {social_a}?",
            "Ideal dimensions for a {mod_orient_a} image on {social_a}?",
        ),
    ),
    # ---- networking
    F(
        "wired_a",
        "networking",
        (
            "Why does my {mod_wired_a} connection keep dropping on {os_a}?",
            "What causes my {os_a} computer to lose its {mod_wired_a} network link?",
            "My {mod_wired_a} internet keeps disconnecting on {os_a}: why?",
        ),
    ),
    F(
        "firewall_a",
        "networking",
        (
            "How do I {act_allow_a} {mod_inbound_a} traffic on port 8080 in Windows Firewall?",
            "What's the Windows Defender Firewall rule to {act_allow_a} {mod_inbound_a} connections on port 8080?",
            "Windows firewall, port 8080, {mod_inbound_a} traffic: how do I {act_allow_a} it?",
        ),
    ),
    F(
        "hotspot_a",
        "networking",
        (
            "How do I share my {phone}'s internet connection with my {phone2}?",
            "What's the way to get my {phone2} online through my {phone}'s hotspot?",
            "Tethering: {phone} as a hotspot for my {phone2}, how?",
        ),
    ),
    F(
        "static_ip_a",
        "networking",
        (
            "How do I set a {mod_static_a} IP address on {os_a}?",
            "Where in the {os_a} network settings can I give my computer a {mod_static_a} IP?",
            "Configuring a {mod_static_a} IP in {os_a}: steps?",
        ),
    ),
    F(
        "router_reboot_a",
        "networking",
        (
            "How do I make my {router_a} router restart automatically {time_a}?",
            "Can I schedule my {router_a} router to reboot {time_a}?",
            "{router_a} router, automatic reboot {time_a}: setup?",
        ),
    ),
    F(
        "firmware_a",
        "networking",
        (
            "How do I {act_update_a} the firmware on my {router_a} router?",
            "What are the steps to {act_update_a} my {router_a} router's firmware version?",
            "{router_a} router: {act_update_a} its firmware, how?",
        ),
    ),
]


# ==== retail, real estate, cars, energy, insurance, public transport (names end with _b)

_LEXICONS_B: dict[str, Lexicon] = {
    # ---- antonymous verbs ----
    "act_subscribe_b": (
        "antonym",
        [("subscribe to", "sign up for", "opt in to"), ("unsubscribe from", "opt out of")],
        True,
    ),
    "act_publish_b": ("antonym", [("publish", "post"), ("take down", "unpublish")], True),
    "act_pickup_b": ("antonym", [("pick up", "collect"), ("drop off", "deposit")], True),
    "act_accel_b": ("antonym", [("speed up", "accelerate"), ("slow down", "brake")], True),
    "act_activate_b": (
        "antonym",
        [("activate", "engage"), ("deactivate", "disengage")],
        True,
    ),
    "act_move_b": ("antonym", [("move into",), ("move out of",)], True),
    "act_connect_b": ("antonym", [("connect", "hook up"), ("disconnect", "cut off")], True),
    "act_charge_b": ("antonym", [("charge",), ("discharge", "drain")], True),
    "act_upgrade_b": ("antonym", [("upgrade",), ("downgrade",)], True),
    "act_extend_b": ("antonym", [("extend", "prolong"), ("cancel", "terminate")], True),
    "act_board_b": ("antonym", [("board", "get on"), ("get off", "exit")], True),
    "act_topup_b": (
        "antonym",
        [("top up", "add money to", "load money onto"), ("cash out", "withdraw money from")],
        True,
    ),
    # ---- antonymous modifiers ----
    "mod_opened_b": ("antonym", [("opened", "unsealed"), ("unopened", "sealed")], True),
    "mod_sale_b": (
        "antonym",
        [("discounted", "sale", "marked-down"), ("full-price", "regular-price")],
        True,
    ),
    "mod_large_b": ("antonym", [("large", "bulky", "oversized"), ("small", "compact")], True),
    "mod_new_b": (
        "antonym",
        [("new", "brand-new"), ("used", "second-hand", "pre-owned")],
        True,
    ),
    "mod_manual_b": ("antonym", [("manual",), ("automatic",)], True),
    "mod_wet_b": ("antonym", [("wet", "rain-soaked"), ("dry",)], True),
    "mod_freehold_b": ("antonym", [("freehold",), ("leasehold",)], True),
    "mod_fixed_b": ("antonym", [("fixed", "fixed-price"), ("variable", "flexible")], True),
    "mod_facing_b": ("antonym", [("south-facing",), ("north-facing",)], True),
    "mod_sunny_b": ("antonym", [("sunny", "clear"), ("cloudy", "overcast")], True),
    "mod_insured_b": ("antonym", [("insured",), ("uninsured",)], True),
    "mod_peak_b": ("antonym", [("peak", "busy"), ("off-peak", "quiet")], True),
    # ---- entities ----
    "store_b": (
        "entity",
        [("Walmart",), ("Target",), ("Best Buy",), ("Costco",), ("Home Depot",), ("IKEA",)],
        False,
    ),
    "market_b": (
        "entity",
        [("Etsy",), ("Facebook Marketplace",), ("Craigslist",), ("Vinted",), ("Depop",)],
        False,
    ),
    "brand_b": (
        "entity",
        [
            ("Toyota",),
            ("Ford",),
            ("Volkswagen", "VW"),
            ("Honda",),
            ("Tesla",),
            ("BMW",),
            ("Hyundai",),
            ("Kia",),
            ("Nissan",),
            ("Mazda",),
        ],
        False,
    ),
    "insurer_b": (
        "entity",
        [("Allstate",), ("GEICO", "Geico"), ("State Farm",), ("Progressive",), ("Aviva",)],
        False,
    ),
    "peril_b": (
        "entity",
        [("flooding", "floods"), ("burst pipes",), ("subsidence",), ("storms",), ("fire",)],
        False,
    ),
    # ---- audiences ----
    "shopper_b": (
        "audience",
        [
            ("students",),
            ("seniors", "pensioners"),
            ("military members", "service members"),
            ("teachers", "educators"),
            ("nurses",),
            ("first responders",),
        ],
        False,
    ),
    "driver_b": (
        "audience",
        [
            ("new drivers", "newly qualified drivers"),
            ("learner drivers", "learners"),
            ("drivers under 25", "under-25 drivers"),
            ("drivers over 70", "over-70 drivers"),
            ("professional drivers", "commercial drivers"),
        ],
        False,
    ),
    "buyer_b": (
        "audience",
        [
            ("first-time buyers", "first-time homebuyers"),
            ("property investors",),
            ("foreign buyers", "non-residents"),
            ("retirees", "retired people"),
            ("self-employed buyers", "self-employed people"),
            ("key workers", "essential workers"),
        ],
        False,
    ),
    "household_b": (
        "audience",
        [
            ("homeowners",),
            ("pensioners", "retirees"),
            ("low-income households", "families on low incomes"),
            ("farmers",),
            ("small businesses", "small firms"),
            ("schools",),
        ],
        False,
    ),
    "rider_b": (
        "audience",
        [
            ("students", "full-time students"),
            ("seniors", "pensioners"),
            ("disabled passengers", "passengers with disabilities"),
            ("veterans", "military veterans"),
            ("jobseekers", "unemployed people"),
            ("schoolchildren", "pupils"),
        ],
        False,
    ),
    # ---- time windows ----
    "time_b": (
        "time",
        [
            ("on Sundays", "on a Sunday"),
            ("on public holidays", "on bank holidays"),
            ("after midnight", "past midnight"),
            ("before 7am", "before seven in the morning"),
            ("on Christmas Day", "on December 25th"),
            ("after 10pm", "after ten at night"),
        ],
        False,
    ),
    "hour_b": (
        "time",
        [
            ("overnight", "during the night"),
            ("at midday", "around noon"),
            ("in the early evening",),
            ("on weekends", "at the weekend"),
            ("in the early morning",),
        ],
        False,
    ),
    "season_b": (
        "time",
        [
            ("in spring", "in springtime"),
            ("in autumn", "in the fall"),
            ("in winter", "during winter"),
            ("in summer", "during summer"),
            ("around Christmas", "over the Christmas holidays"),
            ("in January",),
        ],
        False,
    ),
    # ---- product tiers ----
    "delivery_b": (
        "tier",
        [
            ("standard delivery", "standard shipping"),
            ("express delivery", "express shipping"),
            ("next-day delivery", "next-day shipping"),
            ("same-day delivery", "same-day shipping"),
            ("economy delivery", "economy shipping"),
        ],
        False,
    ),
    "pass_b": (
        "tier",
        [
            ("single ticket", "single-ride ticket"),
            ("day pass", "one-day pass"),
            ("weekly pass", "7-day pass"),
            ("monthly pass", "30-day pass"),
            ("yearly pass", "12-month pass"),
        ],
        False,
    ),
    "policy_b": ("tier", [("Bronze",), ("Silver",), ("Gold",), ("Platinum",)], False),
}

_FAMILIES_B = [
    # ---- retail: orders, returns, coupons, delivery, marketplaces ----
    F(
        "newsletter_b",
        "retail",
        (
            "How do I {act_subscribe_b} {store_b}'s marketing emails?",
            "Is there a way to {act_subscribe_b} {store_b}'s promotional newsletter?",
            "{act_subscribe_b} {store_b} promo mail: how?",
        ),
    ),
    F(
        "listing_b",
        "retail",
        (
            "How do I {act_publish_b} a listing on {market_b}?",
            "What are the steps to {act_publish_b} an ad for my item on {market_b}?",
            "Selling stuff on {market_b}, want to {act_publish_b} the product page: how?",
        ),
    ),
    F(
        "locker_b",
        "retail",
        (
            "Can I {act_pickup_b} a parcel at a locker {time_b}?",
            "Are package lockers available to {act_pickup_b} parcels {time_b}?",
            "Is it possible to {act_pickup_b} a package at a parcel station {time_b}?",
        ),
    ),
    F(
        "opened_return_b",
        "retail",
        (
            "Does {store_b} take back {mod_opened_b} items without a receipt?",
            "Will {store_b} accept a return of {mod_opened_b} products if I lost the receipt?",
            "Returning {mod_opened_b} goods to {store_b} with no proof of purchase: allowed?",
        ),
    ),
    F(
        "bulky_b",
        "retail",
        (
            "Is {delivery_b} available for {mod_large_b} items?",
            "Can I choose {delivery_b} when ordering {mod_large_b} products?",
            "{mod_large_b} goods: do you offer {delivery_b}?",
        ),
    ),
    F(
        "delivery_cost_b",
        "retail",
        (
            "How much does {delivery_b} cost on orders under $50?",
            "What's the fee for {delivery_b} if my basket comes to less than 50 dollars?",
            "Price of {delivery_b} for a small order below $50?",
        ),
    ),
    F(
        "shopper_discount_b",
        "retail",
        (
            "Does {store_b} give a discount to {shopper_b}?",
            "Can {shopper_b} get money off at {store_b}?",
            "Any {store_b} deals reserved for {shopper_b}?",
        ),
    ),
    F(
        "price_match_b",
        "retail",
        (
            "Will {store_b} match a lower price from {store_b2}?",
            "Does {store_b} price-match {store_b2}'s deals?",
            "Found it cheaper at {store_b2}; can I get {store_b} to match it?",
        ),
    ),
    F(
        "gift_card_b",
        "retail",
        (
            "Can {person} give the balance on their {store_b} gift card to {person2}?",
            "Is it possible to move {store_b} gift card credit from {person} over to {person2}?",
            "{person} wants to pass unused {store_b} gift card money on to {person2}: doable?",
        ),
    ),
    F(
        "sale_exchange_b",
        "retail",
        (
            "[Can|Can't] I exchange a {mod_sale_b} item without the receipt?",
            "Is swapping a {mod_sale_b} product [|not ]possible if I've lost the receipt?",
            "Exchanging {mod_sale_b} goods with no receipt: [allowed|not allowed]?",
        ),
    ),
    # ---- cars and driving ----
    F(
        "amber_light_b",
        "auto",
        (
            "Should I {act_accel_b} when a traffic light turns amber?",
            "Light changing to yellow ahead: is the right move to {act_accel_b}?",
            "Signal going amber as I approach, do I {act_accel_b}?",
        ),
    ),
    F(
        "braking_b",
        "auto",
        (
            "What is the stopping distance at 50 mph on a {mod_wet_b} road?",
            "How far does a car travel before halting from 50 mph when the tarmac is {mod_wet_b}?",
            "Braking distance from fifty miles an hour, {mod_wet_b} surface?",
        ),
    ),
    F(
        "lane_assist_b",
        "auto",
        (
            "How do I {act_activate_b} lane-keeping assist in a {brand_b}?",
            "Where's the button to {act_activate_b} lane assist on my {brand_b}?",
            "{brand_b} lane keep feature: how to {act_activate_b} it?",
        ),
    ),
    F(
        "warranty_b",
        "auto",
        (
            "What warranty comes with a {mod_new_b} {brand_b} from a dealer?",
            "How long is the dealership guarantee on a {mod_new_b} {brand_b}?",
            "Dealer cover for a {mod_new_b} {brand_b}: how many years?",
        ),
    ),
    F(
        "hill_start_b",
        "auto",
        (
            "How do I pull away on a steep hill in a car with {mod_manual_b} transmission?",
            "Hill starts in cars with {mod_manual_b} gearboxes: technique?",
            "Best way to get moving uphill from a stop when the car is {mod_manual_b}?",
        ),
    ),
    F(
        "learner_motorway_b",
        "auto",
        (
            "[Are|Aren't] {driver_b} allowed on motorways in {country}?",
            "Can {driver_b} in {country} [|not ]use the highway?",
            "Highway driving in {country}: [permitted|forbidden] for {driver_b}?",
        ),
    ),
    F(
        "reliability_b",
        "auto",
        (
            "Is a {brand_b} more reliable than a {brand_b2}?",
            "Do {brand_b} cars break down less often than {brand_b2} ones?",
            "Reliability check: does {brand_b} beat {brand_b2}?",
        ),
    ),
    F(
        "car_title_b",
        "auto",
        (
            "How does {person} transfer ownership of a car to {person2}?",
            "What paperwork does {person} need to sign a vehicle over to {person2}?",
            "{person} is selling the car to {person2}: how is the title handed over?",
        ),
    ),
    # ---- home and real estate buying ----
    F(
        "move_checklist_b",
        "realestate",
        (
            "What should be on my checklist when I {act_move_b} a house?",
            "Things to sort out before you {act_move_b} a home?",
            "Planning to {act_move_b} my property next month: what needs doing?",
        ),
    ),
    F(
        "leasehold_b",
        "realestate",
        (
            "What extra costs come with buying a {mod_freehold_b} flat?",
            "Which additional charges apply when you purchase a {mod_freehold_b} property?",
            "Buying {mod_freehold_b}: fees on top of the price?",
        ),
    ),
    F(
        "buyer_scheme_b",
        "realestate",
        (
            "What government schemes help {buyer_b} purchase a home in {country}?",
            "Which state programmes support {buyer_b} buying property in {country}?",
            "{country}: public assistance for {buyer_b} who want a house?",
        ),
    ),
    F(
        "house_season_b",
        "realestate",
        (
            "Are houses in {city} cheaper to buy {season_b}?",
            "Do homes in {city} sell for less {season_b}?",
            "Buying property in {city} {season_b}: lower prices?",
        ),
    ),
    F(
        "buyout_b",
        "realestate",
        (
            "How can {person} buy out {person2}'s share of the house they own together?",
            "What's the process for {person} to purchase {person2}'s stake in a jointly "
            "owned home?",
            "{person} wants to take over {person2}'s portion of a co-owned property: how?",
        ),
    ),
    F(
        "survey_b",
        "realestate",
        (
            "[Is|Isn't] a home inspection mandatory when buying a house in {country}?",
            "Buyers in {country} [must|needn't] get a property survey before purchase: true?",
            "Building survey before buying in {country}: [required|optional]?",
        ),
    ),
    F(
        "viewing_b",
        "realestate",
        (
            "Can I book a viewing of a house for sale {time_b}?",
            "Do estate agents show properties {time_b}?",
            "Visiting a home on the market {time_b}: can it be arranged?",
        ),
    ),
    # ---- energy and utilities ----
    F(
        "gas_supply_b",
        "energy",
        (
            "How do I {act_connect_b} the gas supply to my property?",
            "Who do I call to {act_connect_b} mains gas at my home?",
            "Want to {act_connect_b} household gas service: who handles it?",
        ),
    ),
    F(
        "home_battery_b",
        "energy",
        (
            "Should I {act_charge_b} my home battery {hour_b}?",
            "Does it make sense to {act_charge_b} a domestic storage battery {hour_b}?",
            "{act_charge_b} the house battery {hour_b}: smart move?",
        ),
    ),
    F(
        "tariff_b",
        "energy",
        (
            "Is a {mod_fixed_b} energy tariff worth it right now?",
            "Should I sign up for a {mod_fixed_b} electricity deal at the moment?",
            "Going for a {mod_fixed_b} power contract these days: good choice?",
        ),
    ),
    F(
        "roof_solar_b",
        "energy",
        (
            "Are solar panels worth installing on a {mod_facing_b} roof?",
            "Does a {mod_facing_b} roof make rooftop PV worthwhile?",
            "Photovoltaics on a {mod_facing_b} roof: good investment?",
        ),
    ),
    F(
        "solar_output_b",
        "energy",
        (
            "How much electricity do {qty} solar panels make in {mod_sunny_b} weather?",
            "What's the daily output of {qty} rooftop PV modules when it's {mod_sunny_b}?",
            "Energy produced per day by {qty} panels, {mod_sunny_b} conditions?",
        ),
    ),
    F(
        "solar_grant_b",
        "energy",
        (
            "Which grants help {household_b} put in solar panels in {country}?",
            "Is there funding in {country} for {household_b} who want rooftop solar?",
            "Subsidies for {household_b} installing PV, {country}: what exists?",
        ),
    ),
    F(
        "power_cut_b",
        "energy",
        (
            "[Do|Don't] solar panels work during a power cut?",
            "Will rooftop PV [keep|stop] supplying the house in a blackout?",
            "Grid outage: solar system [still produces power|stops producing]?",
        ),
    ),
    # ---- insurance: home, car, travel ----
    F(
        "policy_change_b",
        "insurance",
        (
            "Can I {act_upgrade_b} my car insurance cover mid-policy?",
            "Is it possible to {act_upgrade_b} a motor policy before it renews?",
            "{act_upgrade_b} auto insurance partway through the term: allowed?",
        ),
    ),
    F(
        "travel_cover_b",
        "insurance",
        (
            "Can I {act_extend_b} my travel insurance while I'm already in {country}?",
            "Is it possible to {act_extend_b} trip cover when you're abroad in {country}?",
            "Already abroad in {country} and want to {act_extend_b} my travel insurance: possible?",
        ),
    ),
    F(
        "uninsured_crash_b",
        "insurance",
        (
            "What happens with my claim if an {mod_insured_b} driver hits my car?",
            "My vehicle was damaged by a motorist who was {mod_insured_b}: how does the "
            "claim work?",
            "Collision caused by an {mod_insured_b} driver: claim process?",
        ),
    ),
    F(
        "premium_b",
        "insurance",
        (
            "How much does car insurance cost for {driver_b} in {country}?",
            "What do {driver_b} in {country} typically pay for motor cover?",
            "Average auto insurance premium, {driver_b}, {country}?",
        ),
    ),
    F(
        "home_cover_b",
        "insurance",
        (
            "Does the {policy_b} home insurance policy cover {peril_b}?",
            "Is damage caused by {peril_b} included in {policy_b} house cover?",
            "{policy_b} buildings and contents plan: protected against {peril_b}?",
        ),
    ),
    F(
        "insurer_switch_b",
        "insurance",
        (
            "How do I switch my car insurance from {insurer_b} to {insurer_b2}?",
            "Moving my motor policy over from {insurer_b} to {insurer_b2}: what's involved?",
            "Steps to leave {insurer_b} for {insurer_b2} on auto cover?",
        ),
    ),
    # ---- public transport ----
    F(
        "back_door_b",
        "transit",
        (
            "Can I {act_board_b} the bus through the rear door in {city}?",
            "Is it allowed to {act_board_b} city buses in {city} by the back door?",
            "{city} buses: {act_board_b} using the back doors, permitted?",
        ),
    ),
    F(
        "card_topup_b",
        "transit",
        (
            "How do I {act_topup_b} my transit card online?",
            "Is there a website where I can {act_topup_b} my metro card?",
            "Need to {act_topup_b} a travel smartcard over the internet: how?",
        ),
    ),
    F(
        "bike_train_b",
        "transit",
        (
            "Can I bring a bicycle on trains in {city} at {mod_peak_b} times?",
            "Are bikes permitted on {city} commuter rail during {mod_peak_b} hours?",
            "Taking a bike aboard {city} trains in {mod_peak_b} periods: allowed?",
        ),
    ),
    F(
        "concession_b",
        "transit",
        (
            "Do {rider_b} get reduced fares on the metro in {city}?",
            "Is there a cheaper subway ticket for {rider_b} in {city}?",
            "{city} underground: concessions for {rider_b}?",
        ),
    ),
    F(
        "airport_pass_b",
        "transit",
        (
            "Can I use a {pass_b} on the airport express train in {city}?",
            "Is the {city} airport rail link included with a {pass_b}?",
            "{city} airport express: valid with a {pass_b}?",
        ),
    ),
    F(
        "scooter_metro_b",
        "transit",
        (
            "[Are|Aren't] e-scooters allowed on the {city} metro {time_b}?",
            "Is it [|not ]permitted to take an electric scooter on {city}'s underground {time_b}?",
            "E-scooters on {city} subway trains {time_b}: [allowed|banned]?",
        ),
    ),
    F(
        "group_fare_b",
        "transit",
        (
            "How much is a group ticket for {qty} people on the {city} tram?",
            "What does it cost for {qty} of us to ride the tram in {city} together?",
            "{city} tram fare for a party of {qty}?",
        ),
    ),
]


# ==== education, workplace, government services, cooking, gardening, music, events, fitness (names end with _c)

_LEXICONS_C: dict[str, Lexicon] = {
    # ---- antonymous verbs -----------------------------------------------------------------
    "act_enroll_c": (
        "antonym",
        [("enroll in", "register for"), ("withdraw from", "drop out of")],
        True,
    ),
    "act_promote_c": ("antonym", [("promote",), ("demote",)], True),
    "act_optin_c": ("antonym", [("opt into", "sign up to"), ("opt out of", "withdraw from")], True),
    "act_submit_c": ("antonym", [("submit", "put in"), ("withdraw", "retract")], True),
    "act_register_c": (
        "antonym",
        [("register",), ("deregister", "cancel the registration of")],
        True,
    ),
    "act_thicken_c": ("antonym", [("thicken",), ("thin out", "thin")], True),
    "act_book_c": ("antonym", [("book", "reserve"), ("cancel",)], True),
    "act_plant_c": ("antonym", [("plant",), ("dig up", "lift")], True),
    "act_attract_c": ("antonym", [("attract", "lure"), ("repel", "deter")], True),
    "act_tighten_c": ("antonym", [("tighten",), ("loosen", "slacken")], True),
    "act_upgrade_c": ("antonym", [("upgrade",), ("downgrade",)], True),
    "act_renew_c": ("antonym", [("renew", "extend"), ("cancel", "terminate")], True),
    # ---- antonymous modifiers -------------------------------------------------------------
    "mod_fulltime_c": ("antonym", [("full-time",), ("part-time",)], True),
    "mod_paid_c": ("antonym", [("paid",), ("unpaid",)], True),
    "mod_express_c": (
        "antonym",
        [("expedited", "express", "fast-track"), ("standard", "regular", "normal")],
        True,
    ),
    "mod_rare_c": ("antonym", [("rare",), ("well-done", "well done")], True),
    "mod_spicy_c": ("antonym", [("spicy", "fiery"), ("mild",)], True),
    "mod_indoor_c": (
        "antonym",
        [("indoors", "inside"), ("outdoors", "outside", "in the open air")],
        True,
    ),
    "mod_major_c": ("antonym", [("major",), ("minor",)], True),
    "mod_acoustic_c": ("antonym", [("acoustic",), ("electric",)], True),
    "mod_easy_c": ("antonym", [("easy", "simple"), ("difficult", "challenging", "hard")], True),
    "mod_before_c": ("antonym", [("before",), ("after",)], True),
    "mod_upper_c": ("antonym", [("upper-body", "upper body"), ("lower-body", "lower body")], True),
    # ---- audiences ------------------------------------------------------------------------
    "learner_c": (
        "audience",
        [
            ("international students", "overseas students"),
            ("adult learners", "mature students"),
            ("graduate students", "grad students"),
            ("first-generation students", "first-gen students"),
            ("undergraduates", "undergrads"),
        ],
        False,
    ),
    "staff_c": (
        "audience",
        [
            ("interns", "trainees"),
            ("contractors", "freelance contractors"),
            ("part-time employees", "part-timers"),
            ("new hires", "new starters"),
            ("temporary workers", "temps"),
        ],
        False,
    ),
    "applicant_c": (
        "audience",
        [
            ("minors", "applicants under 18"),
            ("first-time applicants", "first-timers"),
            ("seniors", "applicants over 65"),
            ("dual citizens", "dual nationals"),
            ("naturalized citizens", "newly naturalized citizens"),
        ],
        False,
    ),
    "player_c": (
        "audience",
        [
            ("young children", "little kids"),
            ("adult beginners", "grown-up beginners"),
            ("retirees", "retired people"),
            ("left-handed players", "lefties"),
            ("people with small hands", "players with small hands"),
        ],
        False,
    ),
    "guest_c": (
        "audience",
        [
            ("students", "full-time students"),
            ("seniors", "over-65s"),
            ("children under 12", "kids under twelve"),
            ("military veterans", "veterans"),
            ("teachers", "schoolteachers"),
            ("wheelchair users",),
        ],
        False,
    ),
    "fit_aud_c": (
        "audience",
        [
            ("beginners", "novices"),
            ("people over 50", "over-50s"),
            ("teenagers", "teens"),
            ("office workers", "people with desk jobs"),
            ("busy parents", "parents short on time"),
        ],
        False,
    ),
    # ---- time windows ---------------------------------------------------------------------
    "term_c": (
        "time",
        [
            ("in the fall semester", "in the autumn term"),
            ("in the spring semester", "in the spring term"),
            ("over the summer break", "during the summer holidays"),
            ("after the add/drop deadline", "past the add/drop deadline"),
            ("in the first week of term", "during the first week of classes"),
        ],
        False,
    ),
    "paytime_c": (
        "time",
        [
            ("on public holidays", "on bank holidays"),
            ("at weekends", "on Saturdays and Sundays"),
            ("overnight", "through the night"),
            ("on Christmas Day",),
            ("on their day off", "on a rest day"),
        ],
        False,
    ),
    "mealtime_c": (
        "time",
        [
            ("at lunchtime", "for lunch"),
            ("on Friday night", "on Friday evening"),
            ("for Sunday brunch", "on Sunday morning"),
            ("on New Year's Eve",),
            ("for dinner tomorrow", "for tomorrow evening"),
        ],
        False,
    ),
    "season_c": (
        "time",
        [
            ("in early spring", "at the start of spring"),
            ("in midsummer", "in the middle of summer"),
            ("in autumn", "in the fall"),
            ("in late winter", "at the end of winter"),
            ("right after flowering", "straight after flowering"),
        ],
        False,
    ),
    "evtime_c": (
        "time",
        [
            ("this weekend", "over the weekend"),
            ("tonight", "this evening"),
            ("next month", "in the coming month"),
            ("on New Year's Eve",),
            ("over the holidays", "during the holiday season"),
        ],
        False,
    ),
    "fittime_c": (
        "time",
        [
            ("early in the morning", "before 7 a.m."),
            ("at lunchtime", "around midday"),
            ("after work", "in the early evening"),
            ("late at night", "after 10 p.m."),
            ("on Sundays",),
        ],
        False,
    ),
    # ---- tiers ----------------------------------------------------------------------------
    "coursetier_c": (
        "tier",
        [
            ("audit track", "free audit option"),
            ("verified track", "paid certificate track"),
            ("annual subscription", "yearly subscription"),
            ("monthly subscription", "month-to-month subscription"),
        ],
        False,
    ),
    "seat_c": (
        "tier",
        [
            ("general admission", "GA"),
            ("VIP",),
            ("balcony",),
            ("front-row", "front row"),
            ("early-bird", "early bird"),
        ],
        False,
    ),
    "gymplan_c": (
        "tier",
        [
            ("off-peak membership", "off-peak plan"),
            ("unlimited membership", "all-access membership"),
            ("student membership", "student plan"),
            ("annual membership", "yearly membership"),
            ("monthly membership", "month-to-month plan"),
        ],
        False,
    ),
    # ---- quantities -----------------------------------------------------------------------
    "years_c": (
        "quantity",
        [
            ("six months", "half a year"),
            ("one year", "a year", "12 months"),
            ("two years", "2 years"),
            ("five years", "5 years"),
            ("ten years", "a decade"),
        ],
        False,
    ),
    # ---- entities -------------------------------------------------------------------------
    "doc_c": (
        "entity",
        [
            ("passport",),
            ("driver's license", "driving licence"),
            ("national ID card", "national identity card"),
            ("learner's permit", "learner's licence"),
            ("voter ID card", "voter card"),
        ],
        False,
    ),
    "sauce_c": (
        "entity",
        [
            ("gravy",),
            ("tomato sauce", "marinara sauce"),
            ("cheese sauce",),
            ("curry",),
            ("soup",),
            ("stew",),
        ],
        False,
    ),
    "cut_c": (
        "entity",
        [
            ("ribeye", "rib-eye"),
            ("sirloin",),
            ("fillet", "tenderloin"),
            ("T-bone",),
            ("flank",),
        ],
        False,
    ),
    "ingr_c": (
        "entity",
        [
            ("butter",),
            ("olive oil",),
            ("Greek yogurt",),
            ("sour cream",),
            ("heavy cream", "double cream"),
            ("coconut milk",),
            ("honey",),
            ("maple syrup",),
        ],
        False,
    ),
    "cuisine_c": (
        "entity",
        [
            ("Thai",),
            ("Indian",),
            ("Mexican",),
            ("Korean",),
            ("Ethiopian",),
            ("Sichuan", "Szechuan"),
        ],
        False,
    ),
    "bulb_c": (
        "entity",
        [("tulip",), ("daffodil",), ("dahlia",), ("lily",), ("crocus",), ("hyacinth",)],
        False,
    ),
    "bug_c": (
        "entity",
        [
            ("bees",),
            ("butterflies",),
            ("ladybugs", "ladybirds"),
            ("hummingbirds",),
            ("songbirds",),
            ("hedgehogs",),
        ],
        False,
    ),
    "shrub_c": (
        "entity",
        [
            ("roses", "rose bushes"),
            ("hydrangeas",),
            ("lavender",),
            ("apple trees",),
            ("clematis",),
            ("fig trees",),
        ],
        False,
    ),
    "crop_c": (
        "entity",
        [
            ("tomatoes",),
            ("potatoes",),
            ("beans",),
            ("onions",),
            ("cabbage",),
            ("carrots",),
            ("garlic",),
            ("squash",),
        ],
        False,
    ),
    "strinst_c": (
        "entity",
        [
            ("guitar",),
            ("violin", "fiddle"),
            ("cello",),
            ("ukulele", "uke"),
            ("bass guitar", "bass"),
            ("mandolin",),
        ],
        False,
    ),
    "key_c": (
        "entity",
        [
            ("C",),
            ("D",),
            ("E flat", "E-flat"),
            ("F sharp", "F#"),
            ("G",),
            ("B flat", "B-flat"),
            ("A",),
        ],
        False,
    ),
    "inst_c": (
        "entity",
        [
            ("piano",),
            ("guitar",),
            ("violin",),
            ("drums",),
            ("saxophone", "sax"),
            ("ukulele", "uke"),
            ("flute",),
            ("trumpet",),
        ],
        False,
    ),
    "workout_c": (
        "entity",
        [
            ("a long run",),
            ("weightlifting", "a lifting session"),
            ("a HIIT class", "a HIIT session"),
            ("yoga", "a yoga class"),
            ("a swim", "a swimming session"),
            ("a spin class", "an indoor cycling class"),
        ],
        False,
    ),
    "exercise_c": (
        "entity",
        [
            ("squats",),
            ("push-ups", "press-ups"),
            ("lunges",),
            ("planks",),
            ("burpees",),
            ("pull-ups",),
            ("deadlifts",),
        ],
        False,
    ),
}

_FAMILIES_C = [
    # ---- education ------------------------------------------------------------------------
    F(
        "enroll_late_c",
        "education",
        (
            "Can I {act_enroll_c} a course {term_c} without paying a penalty?",
            "Will I be charged a penalty if I {act_enroll_c} a class {term_c}?",
            "{act_enroll_c} a module {term_c}: any financial penalty?",
        ),
    ),
    F(
        "student_aid_c",
        "education",
        (
            "Can {learner_c} studying {mod_fulltime_c} get financial aid?",
            "Is student funding available to {learner_c} who are enrolled {mod_fulltime_c}?",
            "{mod_fulltime_c} {learner_c}: eligible for grants and loans?",
        ),
    ),
    F(
        "mooc_cert_c",
        "education",
        (
            "Do I get a certificate if I take an online course on the {coursetier_c}?",
            "Does the {coursetier_c} include a completion certificate for MOOCs?",
            "Online class, {coursetier_c}: is a certificate issued at the end?",
        ),
    ),
    F(
        "scholarship_cover_c",
        "education",
        (
            "What costs [are|aren't] covered by a typical scholarship for {learner_c}?",
            "Which expenses does a standard scholarship for {learner_c} [|not ]pay for?",
            "Scholarships for {learner_c}: what [do they cover|do they leave out]?",
        ),
    ),
    # ---- workplace ------------------------------------------------------------------------
    F(
        "promote_c",
        "workplace",
        (
            "What's the right way to {act_promote_c} someone on my team?",
            "As a manager, how should I {act_promote_c} one of my direct reports?",
            "{act_promote_c} an employee who reports to me: best practice?",
        ),
    ),
    F(
        "pension_c",
        "workplace",
        (
            "Can {staff_c} {act_optin_c} the company pension scheme?",
            "Are {staff_c} able to {act_optin_c} our employer's retirement plan?",
            "Workplace pension: may {staff_c} {act_optin_c} it?",
        ),
    ),
    F(
        "leave_request_c",
        "workplace",
        (
            "How do I {act_submit_c} a request for {mod_paid_c} leave in the HR portal?",
            "Where in the employee self-service system can I {act_submit_c} an application "
            "for {mod_paid_c} time off?",
            "HR system: how to {act_submit_c} my {mod_paid_c} leave request?",
        ),
    ),
    F(
        "premium_pay_c",
        "workplace",
        (
            "Do {staff_c} get extra pay for working {paytime_c}?",
            "Is there a premium rate for {staff_c} who work {paytime_c}?",
            "Shifts {paytime_c}: are {staff_c} entitled to higher wages?",
        ),
    ),
    F(
        "training_budget_c",
        "workplace",
        (
            "Which training expenses [are|aren't] reimbursed for {staff_c}?",
            "For {staff_c}, what professional development costs does the employer [|not ]cover?",
            "Learning budget for {staff_c}: which costs [qualify|don't qualify]?",
        ),
    ),
    F(
        "shift_handover_c",
        "workplace",
        (
            "How can {person} give one of their shifts to {person2} in the scheduling app?",
            "What's the process for {person2} to take over a shift from {person}?",
            "Shift handover from {person} to {person2} in the rota tool: steps?",
        ),
    ),
    F(
        "notice_period_c",
        "workplace",
        (
            "How much notice must I give my employer in {country} after {years_c} in the job?",
            "What notice period applies in {country} when resigning with {years_c} of service?",
            "Quitting after {years_c} at a company in {country}: how long is the notice?",
        ),
    ),
    # ---- government services and ID documents ---------------------------------------------
    F(
        "residence_reg_c",
        "government",
        (
            "How do I {act_register_c} my address with the city of {city}?",
            "What's the procedure to {act_register_c} my residence in {city}?",
            "{act_register_c} my home address at the {city} town hall: how?",
        ),
    ),
    F(
        "id_processing_c",
        "government",
        (
            "How long does {mod_express_c} processing of a {doc_c} application take?",
            "What's the wait for a {doc_c} if I choose the {mod_express_c} service?",
            "{doc_c} with {mod_express_c} handling: turnaround time?",
        ),
    ),
    F(
        "id_pickup_c",
        "government",
        (
            "Can {person} pick up {person2}'s new {doc_c} for them?",
            "Is {person} allowed to collect the {doc_c} issued to {person2}?",
            "{person2}'s {doc_c} is ready; can {person} fetch it instead?",
        ),
    ),
    F(
        "id_paperwork_c",
        "government",
        (
            "What paperwork do {applicant_c} need to apply for a {doc_c}?",
            "Which supporting documents must {applicant_c} bring when requesting a {doc_c}?",
            "{doc_c} application for {applicant_c}: required papers?",
        ),
    ),
    F(
        "proof_address_c",
        "government",
        (
            "What [counts|doesn't count] as proof of address for a {doc_c} application?",
            "Which documents [are|aren't] accepted as evidence of residence when applying "
            "for a {doc_c}?",
            "Applying for a {doc_c}, address verification: which papers [qualify|don't qualify]?",
        ),
    ),
    # ---- cooking and restaurants ----------------------------------------------------------
    F(
        "sauce_texture_c",
        "cooking",
        (
            "How do I {act_thicken_c} {sauce_c} without changing the flavour?",
            "What's the best trick to {act_thicken_c} my {sauce_c} but keep it tasting the same?",
            "Need to {act_thicken_c} some {sauce_c} and not alter the taste: ideas?",
        ),
    ),
    F(
        "steak_time_c",
        "cooking",
        (
            "How long should I pan-fry {cut_c} steaks to get them {mod_rare_c}?",
            "Cooking time per side for {mod_rare_c} {cut_c} steaks in a skillet?",
            "I want my {cut_c} steaks {mod_rare_c}: how many minutes in the frying pan?",
        ),
    ),
    F(
        "substitute_c",
        "cooking",
        (
            "Can I use {ingr_c} instead of {ingr_c2} in a pan sauce?",
            "Is {ingr_c} a decent replacement for {ingr_c2} when making a sauce?",
            "Out of {ingr_c2}: will {ingr_c} work in its place in my sauce?",
        ),
    ),
    F(
        "table_booking_c",
        "cooking",
        (
            "How do I {act_book_c} a table for {qty} {mealtime_c}?",
            "What's the process to {act_book_c} a table for {qty} guests {mealtime_c}?",
            "{act_book_c} a table, party of {qty}, {mealtime_c}: how?",
        ),
    ),
    F(
        "spice_level_c",
        "cooking",
        (
            "Which {cuisine_c} dishes are {mod_spicy_c}?",
            "What should I order at {cuisine_c} restaurants if I want something {mod_spicy_c}?",
            "{mod_spicy_c} picks from {cuisine_c} cuisine?",
        ),
    ),
    F(
        "herbs_early_c",
        "cooking",
        (
            "Which herbs [should|shouldn't] go into {sauce_c} at the beginning of cooking?",
            "When I make {sauce_c}, what herbs [do|don't] I add early on?",
            "Herbs for {sauce_c} that [belong|don't belong] in the pot from the start?",
        ),
    ),
    # ---- gardening ------------------------------------------------------------------------
    F(
        "bulbs_c",
        "gardening",
        (
            "When is the right time to {act_plant_c} {bulb_c} bulbs?",
            "What month should I {act_plant_c} my {bulb_c} bulbs?",
            "Best season to {act_plant_c} {bulb_c} bulbs?",
        ),
    ),
    F(
        "veg_indoor_c",
        "gardening",
        (
            "Which vegetables [can|can't] be grown {mod_indoor_c} all year round?",
            "What veggies [will|won't] thrive {mod_indoor_c} year-round?",
            "Growing vegetables {mod_indoor_c} through every season: which crops "
            "[work|don't work]?",
        ),
    ),
    F(
        "wildlife_c",
        "gardening",
        (
            "How do I {act_attract_c} {bug_c} in my garden without chemicals?",
            "What's a natural way to {act_attract_c} {bug_c} in the backyard?",
            "{act_attract_c} {bug_c} organically in a home garden: tips?",
        ),
    ),
    F(
        "prune_c",
        "gardening",
        (
            "Is it a good idea to prune {shrub_c} {season_c}?",
            "Should {shrub_c} be cut back {season_c}?",
            "Trimming {shrub_c} {season_c}: right timing?",
        ),
    ),
    F(
        "rotation_c",
        "gardening",
        (
            "Can I grow {crop_c2} in the bed where {crop_c} grew last year?",
            "Is it okay to plant {crop_c2} in a spot that had {crop_c} last season?",
            "Following {crop_c} with {crop_c2} in the same plot the next year: good idea?",
        ),
    ),
    # ---- music and instruments ------------------------------------------------------------
    F(
        "string_pegs_c",
        "music",
        (
            "Which way do I turn the pegs to {act_tighten_c} the strings on my {strinst_c}?",
            "How do I {act_tighten_c} {strinst_c} strings using the tuning pegs?",
            "{strinst_c} tuners: which direction will {act_tighten_c} a string?",
        ),
    ),
    F(
        "scale_notes_c",
        "music",
        (
            "What are the notes in the {key_c} {mod_major_c} scale?",
            "Which pitches make up {key_c} {mod_major_c}?",
            "{key_c} {mod_major_c} scale: list of notes?",
        ),
    ),
    F(
        "first_guitar_c",
        "music",
        (
            "Is an {mod_acoustic_c} guitar a good first instrument for {player_c}?",
            "Should {player_c} start learning on an {mod_acoustic_c} guitar?",
            "{mod_acoustic_c} guitar as the starter instrument for {player_c}: sensible?",
        ),
    ),
    F(
        "repertoire_c",
        "music",
        (
            "What are some {mod_easy_c} songs to play on {inst_c}?",
            "Can you suggest {mod_easy_c} pieces for {inst_c}?",
            "{mod_easy_c} repertoire for {inst_c}: recommendations?",
        ),
    ),
    F(
        "switch_inst_c",
        "music",
        (
            "How hard is it to switch from {inst_c} to {inst_c2}?",
            "I play {inst_c}; how tough is picking up {inst_c2}?",
            "Coming from {inst_c}, will learning {inst_c2} be a struggle?",
        ),
    ),
    # ---- events and tickets ---------------------------------------------------------------
    F(
        "ticket_handover_c",
        "events",
        (
            "How can {person} send their concert ticket to {person2} in the app?",
            "What's the process for {person2} to receive {person}'s gig ticket?",
            "Concert ticket handover, {person} to {person2}: steps?",
        ),
    ),
    F(
        "ticket_change_c",
        "events",
        (
            "Can I {act_upgrade_c} my {seat_c} ticket after I've already paid?",
            "Is it possible to {act_upgrade_c} an existing {seat_c} ticket?",
            "My {seat_c} pass is paid for; can I {act_upgrade_c} it?",
        ),
    ),
    F(
        "theatre_discount_c",
        "events",
        (
            "Does the theatre sell discounted tickets to {guest_c}?",
            "Are there reduced-price theater seats for {guest_c}?",
            "Cheaper admission at the playhouse for {guest_c}?",
        ),
    ),
    F(
        "bag_policy_c",
        "events",
        (
            "What [can|can't] I bring into a concert held {mod_indoor_c}?",
            "Which items [are|aren't] permitted at a gig that takes place {mod_indoor_c}?",
            "Bag policy for a show {mod_indoor_c}: what's [allowed|banned]?",
        ),
    ),
    F(
        "group_tickets_c",
        "events",
        (
            "Is there a group discount if I buy {qty} {seat_c} tickets?",
            "Do you offer a reduced rate when booking {qty} {seat_c} seats together?",
            "Buying {qty} {seat_c} passes at once: any group deal?",
        ),
    ),
    F(
        "gigs_c",
        "events",
        (
            "What concerts are on in {city} {evtime_c}?",
            "Any live music happening in {city} {evtime_c}?",
            "Gigs in {city} {evtime_c}: what's playing?",
        ),
    ),
    # ---- fitness --------------------------------------------------------------------------
    F(
        "gym_membership_c",
        "fitness",
        (
            "How do I {act_renew_c} my {gymplan_c} in the gym app?",
            "Is there a way to {act_renew_c} a fitness club {gymplan_c} from my phone?",
            "{act_renew_c} my {gymplan_c} via the mobile app, no front desk: how?",
        ),
    ),
    F(
        "workout_food_c",
        "fitness",
        (
            "What should I eat {mod_before_c} {workout_c}?",
            "What's the ideal meal or snack to have {mod_before_c} {workout_c}?",
            "Food {mod_before_c} {workout_c}: what works best?",
        ),
    ),
    F(
        "home_workout_c",
        "fitness",
        (
            "What's a good {mod_upper_c} workout for {fit_aud_c} at home?",
            "Which {mod_upper_c} exercises suit {fit_aud_c} training at home?",
            "Home {mod_upper_c} routine for {fit_aud_c}?",
        ),
    ),
    F(
        "muscles_c",
        "fitness",
        (
            "Which muscles [do|don't] {exercise_c} work?",
            "What muscle groups [are|aren't] trained by {exercise_c}?",
            "{exercise_c}: which muscles [get|don't get] targeted?",
        ),
    ),
    F(
        "gym_hours_c",
        "fitness",
        (
            "Can I use the gym {fittime_c} with my {gymplan_c}?",
            "Does my {gymplan_c} give me access to the club {fittime_c}?",
            "Gym access {fittime_c} on my {gymplan_c}: included?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_A, **_LEXICONS_B, **_LEXICONS_C}
FAMILIES: list[F] = _FAMILIES_A + _FAMILIES_B + _FAMILIES_C
