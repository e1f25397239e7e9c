"""A third round of training families for the semantic verifier (written 2026-12-06, before
any training on them): 180 families in sixteen new domains, four or five phrasings each.

Why: the verifier trained on the second round (bench/contrast_more.py) served more paraphrases of
wording it had never seen, and what it still misses there is mostly phrasings it has no like of
(60% of the first fresh set's paraphrases scored below its threshold). This round brings more of
them: more phrasings per family, at least two of them sharing few words with the first, in
domains none of the held-out sets has (checked), with lexicons that repeat no value of any
held-out lexicon (checked when the rows are written). Rows: ``contrast_more2_train.jsonl`` and
``multiturn_more2_train.jsonl`` (seed 17); ``python -m bench.train_verifier --families more2``.

Lexicon and family names end with the letter of the part they come from (``_d``, ``_e``, ``_f``,
``_g``): one per group of domains below.
"""

from __future__ import annotations

from bench.contrast_data import Family as F
from bench.contrast_data import Lexicon

# ==== taxes, retirement, crypto, payroll (names end with _d) ======================================

_LEXICONS_D: dict[str, Lexicon] = {
    # antonyms: verbs
    "act_owe_d": (
        "antonym",
        [
            ("owe money", "owe the IRS", "end up owing"),
            ("get a refund", "receive a refund", "get money back"),
        ],
        True,
    ),
    "act_claim_d": ("antonym", [("claim",), ("stop claiming",)], True),
    "act_contrib_d": (
        "antonym",
        [
            ("contribute to", "put money into", "pay into"),
            ("take money out of", "pull money out of", "make a withdrawal from"),
        ],
        True,
    ),
    "act_stake_d": ("antonym", [("stake",), ("unstake",)], True),
    "act_mint_d": ("antonym", [("mint",), ("burn",)], True),
    "act_onboard_d": ("antonym", [("onboard",), ("offboard",)], True),
    # antonyms: modifiers
    "mod_joint_d": (
        "antonym",
        [
            ("married couples filing jointly", "joint filers", "couples who file jointly"),
            (
                "married couples filing separately",
                "married-filing-separately filers",
                "couples who file separately",
            ),
        ],
        True,
    ),
    "mod_term_d": ("antonym", [("short-term",), ("long-term",)], True),
    "mod_roth_d": ("antonym", [("Roth",), ("traditional",)], True),
    "mod_vested_d": ("antonym", [("vested",), ("unvested", "non-vested")], True),
    "mod_gain_d": (
        "antonym",
        [("at a profit", "at a gain"), ("at a loss", "for less than I paid")],
        True,
    ),
    "mod_hotcold_d": (
        "antonym",
        [("hot wallet", "software wallet"), ("cold wallet", "hardware wallet")],
        True,
    ),
    "mod_exempt_d": ("antonym", [("exempt", "salaried exempt"), ("non-exempt", "nonexempt")], True),
    "mod_pretax_d": (
        "antonym",
        [("pre-tax", "pretax", "before-tax"), ("post-tax", "after-tax")],
        True,
    ),
    # entities
    "coin_d": (
        "entity",
        [
            ("Bitcoin", "BTC"),
            ("Ethereum", "ETH", "ether"),
            ("Solana", "SOL"),
            ("Dogecoin", "DOGE"),
            ("Litecoin", "LTC"),
        ],
        False,
    ),
    "posc_d": (
        "entity",
        [
            ("Cardano", "ADA"),
            ("Polkadot", "DOT"),
            ("Cosmos", "ATOM"),
            ("Tezos", "XTZ"),
            ("Avalanche", "AVAX"),
        ],
        False,
    ),
    "chain_d": (
        "entity",
        [
            ("Ethereum mainnet", "Ethereum L1"),
            ("Arbitrum", "Arbitrum One"),
            ("Polygon", "Polygon PoS"),
            ("Base", "Coinbase's Base chain"),
            ("Optimism", "OP Mainnet"),
        ],
        False,
    ),
    "exch_d": (
        "entity",
        [("Coinbase",), ("Kraken",), ("Binance.US", "Binance US"), ("Gemini",), ("Crypto.com",)],
        False,
    ),
    "wallet_d": (
        "entity",
        [
            ("MetaMask",),
            ("Trezor",),
            ("Ledger",),
            ("Phantom", "Phantom wallet"),
            ("Exodus", "Exodus wallet"),
            ("Trust Wallet",),
        ],
        False,
    ),
    "taxsoft_d": (
        "entity",
        [
            ("TurboTax",),
            ("H&R Block", "H&R Block Online"),
            ("TaxAct",),
            ("FreeTaxUSA",),
            ("Koinly",),
        ],
        False,
    ),
    "credit_d": (
        "entity",
        [
            ("Earned Income Tax Credit", "EITC", "earned income credit"),
            ("Child Tax Credit", "CTC"),
            ("American Opportunity Tax Credit", "American Opportunity Credit", "AOTC"),
            ("Saver's Credit", "Retirement Savings Contributions Credit"),
        ],
        False,
    ),
    "paymethod_d": (
        "entity",
        [
            ("a credit card",),
            ("IRS Direct Pay", "Direct Pay"),
            ("a paper check", "a check by mail"),
            ("EFTPS", "the Electronic Federal Tax Payment System"),
        ],
        False,
    ),
    "usstate_d": (
        "entity",
        [
            ("California",),
            ("New York",),
            ("New Jersey",),
            ("Pennsylvania",),
            ("Illinois",),
            ("Virginia",),
            ("Colorado",),
        ],
        False,
    ),
    "acct_d": (
        "entity",
        [
            ("401(k)", "401k"),
            ("403(b)", "403b"),
            ("457(b)", "457(b) plan"),
            ("SEP IRA", "SEP-IRA"),
            ("SIMPLE IRA",),
            ("Thrift Savings Plan", "TSP"),
        ],
        False,
    ),
    "benefit_d": (
        "entity",
        [
            ("HSA contributions", "health savings account contributions"),
            ("401(k) deferrals", "elective 401(k) deferrals"),
            ("commuter benefits", "transit benefits"),
            ("tuition reimbursements", "tuition assistance payments"),
            ("dependent care FSA contributions", "dependent care FSA deductions"),
        ],
        False,
    ),
    "paytax_d": (
        "entity",
        [
            ("Social Security tax", "OASDI tax"),
            ("Medicare tax",),
            ("FUTA", "federal unemployment tax"),
            ("federal income tax withholding", "federal withholding"),
        ],
        False,
    ),
    "payrollsw_d": (
        "entity",
        [
            ("Gusto",),
            ("ADP",),
            ("Paychex", "Paychex Flex"),
            ("QuickBooks Payroll", "Intuit QuickBooks Payroll"),
            ("Rippling",),
        ],
        False,
    ),
    # tiers
    "tt_tier_d": (
        "tier",
        [
            ("TurboTax Free Edition", "TurboTax Free"),
            ("TurboTax Deluxe",),
            ("TurboTax Premier", "TurboTax Premium"),
            ("TurboTax Live Full Service", "TurboTax Full Service"),
        ],
        False,
    ),
    "share_d": (
        "tier",
        [
            ("Admiral Shares", "Admiral share class"),
            ("Investor Shares", "Investor share class"),
            ("Institutional Shares", "Institutional share class"),
            ("ETF Shares", "ETF share class"),
        ],
        False,
    ),
    "kraken_d": (
        "tier",
        [
            ("Starter verification", "Starter level"),
            ("Intermediate verification", "Intermediate level"),
            ("Pro verification", "Pro level"),
        ],
        False,
    ),
    "gusto_tier_d": (
        "tier",
        [
            ("Gusto Simple",),
            ("Gusto Plus",),
            ("Gusto Premium",),
            ("Gusto Contractor", "Gusto's contractor-only plan"),
        ],
        False,
    ),
    # time
    "quarter_d": (
        "time",
        [
            ("first-quarter", "Q1"),
            ("second-quarter", "Q2"),
            ("third-quarter", "Q3"),
            ("fourth-quarter", "Q4"),
        ],
        False,
    ),
    "taxyear_d": (
        "time",
        [
            ("for 2023", "for tax year 2023"),
            ("for 2024", "for tax year 2024"),
            ("for 2025", "for tax year 2025"),
        ],
        False,
    ),
    "ssage_d": (
        "time",
        [
            ("at 62", "at age 62", "at sixty-two"),
            ("at 65", "at age 65"),
            ("at 67", "at age 67"),
            ("at 70", "at age 70", "at seventy"),
        ],
        False,
    ),
    "wdage_d": (
        "time",
        [
            ("at 45", "at age 45"),
            ("at 57", "at age 57"),
            ("at 61", "at age 61"),
            ("at 74", "at age 74"),
        ],
        False,
    ),
    "payfreq_d": (
        "time",
        [
            ("every two weeks", "biweekly", "every other week"),
            ("twice a month", "semimonthly"),
            ("once a week", "each week"),
            ("once a month", "each month"),
        ],
        False,
    ),
    # audiences
    "filer_d": (
        "audience",
        [
            ("freelancers", "freelance workers"),
            ("rideshare drivers", "Uber and Lyft drivers"),
            ("real estate agents", "realtors"),
            ("truck drivers", "truckers"),
            ("online sellers", "e-commerce sellers"),
        ],
        False,
    ),
    "saver_d": (
        "audience",
        [
            ("federal employees", "federal workers"),
            ("public school teachers", "teachers at public schools"),
            ("sole proprietors", "solo business owners"),
            ("gig workers", "gig economy workers"),
            ("nonprofit employees", "people working for nonprofits"),
        ],
        False,
    ),
    "cryptoaud_d": (
        "audience",
        [
            ("New York residents", "people living in New York"),
            ("Hawaii residents", "people living in Hawaii"),
            ("UK residents", "people in the UK"),
            ("users under 18", "people under 18"),
        ],
        False,
    ),
    "worker_d": (
        "audience",
        [
            ("household employees", "domestic workers"),
            ("tipped employees", "tipped workers"),
            ("seasonal workers", "seasonal staff"),
            ("teen employees", "employees under 18"),
            ("remote employees", "remote workers"),
        ],
        False,
    ),
    # quantities
    "income_d": (
        "quantity",
        [
            ("$45,000", "45k", "$45k"),
            ("$95,000", "95k", "$95k"),
            ("$180,000", "180k", "$180k"),
            ("$400,000", "400k", "$400k"),
        ],
        False,
    ),
    "hours_d": (
        "quantity",
        [
            ("44 hours", "forty-four hours"),
            ("50 hours", "fifty hours"),
            ("58 hours", "fifty-eight hours"),
            ("65 hours", "sixty-five hours"),
        ],
        False,
    ),
    "staffcount_d": (
        "quantity",
        [
            ("8 employees", "eight employees"),
            ("22 employees", "twenty-two employees"),
            ("55 employees", "fifty-five employees"),
            ("120 employees", "a hundred and twenty employees"),
        ],
        False,
    ),
    "cryptoamt_d": (
        "quantity",
        [
            ("$25", "25 dollars"),
            ("$300", "300 dollars"),
            ("$5,000", "5,000 dollars"),
            ("$30,000", "30,000 dollars"),
        ],
        False,
    ),
}

_FAMILIES_D = [
    # ---------------------------------------------------------------- taxes
    F(
        "std_deduction_d",
        "taxes",
        (
            "What's the standard deduction for {mod_joint_d} {taxyear_d}?",
            "Standard deduction amount {taxyear_d}, {mod_joint_d} — how much is it?",
            "How big a flat write-off do {mod_joint_d} get {taxyear_d} if they skip itemizing?",
            "{mod_joint_d}: tell me the IRS standard deduction {taxyear_d}.",
            "If you don't itemize, what amount can {mod_joint_d} knock off their income {taxyear_d}?",
        ),
    ),
    F(
        "capgains_rate_d",
        "taxes",
        (
            "How are {mod_term_d} capital gains on stocks taxed?",
            "What tax rate do I pay on {mod_term_d} gains when I sell shares?",
            "Selling stock — explain the {mod_term_d} capital gains rate to me.",
            "Which brackets apply to {mod_term_d} profits from equities?",
            "IRS treatment of {mod_term_d} stock market gains?",
        ),
    ),
    F(
        "bracket_d",
        "taxes",
        (
            "Which federal tax bracket am I in with {income_d} of taxable income as a single filer?",
            "Single, {income_d} taxable — what's my marginal rate?",
            "If I file single and my taxable income comes to {income_d}, what top rate do I hit?",
            "Marginal IRS rate for one unmarried person at {income_d} of taxable earnings?",
            "I make {income_d} after deductions and file as single. Where does that land me bracket-wise?",
        ),
    ),
    F(
        "estimated_due_d",
        "taxes",
        (
            "When is the {quarter_d} estimated tax payment due?",
            "Deadline for {quarter_d} quarterly estimated taxes?",
            "By what date do I have to send the IRS my {quarter_d} estimate?",
            "I'm self-employed. What's the due date of the {quarter_d} installment of estimated tax?",
            "{quarter_d} estimated payment: when does the IRS need it?",
        ),
    ),
    F(
        "state_move_d",
        "taxes",
        (
            "I moved from {usstate_d} to {usstate_d2} halfway through the year. How do I file my state returns?",
            "Relocated mid-year out of {usstate_d} and into {usstate_d2} — which part-year resident forms do I need?",
            "How should a part-year resident who left {usstate_d} for {usstate_d2} handle state income tax?",
            "State filings after a mid-year move from {usstate_d} to {usstate_d2}?",
            "Changed my home state in the middle of the year, {usstate_d} first and then {usstate_d2}. What do I owe each one paperwork-wise?",
        ),
    ),
    F(
        "deduct_filer_d",
        "taxes",
        (
            "Which business expenses [can|can't] {filer_d} deduct?",
            "What [is|isn't] tax-deductible for {filer_d}?",
            "List the write-offs {filer_d} [are allowed|are not allowed] to claim.",
            "{filer_d}: which costs [qualify|don't qualify] as deductions on Schedule C?",
            "Tax season for {filer_d} — which kinds of spending [may|may not] be written off?",
        ),
    ),
    F(
        "tt_tier_d",
        "taxes",
        (
            "What [can|can't] I file with {tt_tier_d}?",
            "Which tax situations [does|doesn't] {tt_tier_d} cover?",
            "List the forms and schedules {tt_tier_d} [supports|doesn't support].",
            "{tt_tier_d}: what [is|isn't] included?",
            "Before I pay for it, which filing scenarios [are|aren't] handled by {tt_tier_d}?",
        ),
    ),
    F(
        "credit_elig_d",
        "taxes",
        (
            "Who [qualifies|doesn't qualify] for the {credit_d}?",
            "What are the eligibility rules that [let you claim|disqualify you from] the {credit_d}?",
            "{credit_d} eligibility: which taxpayers [can|cannot] get it?",
            "Which filers [are eligible|are ineligible] for the {credit_d}?",
            "Can you explain who [is allowed|isn't allowed] to take the {credit_d}?",
        ),
    ),
    F(
        "owe_refund_d",
        "taxes",
        (
            "Why did I {act_owe_d} this year when my pay didn't change?",
            "Same salary as last year, but this time I {act_owe_d} on my return. What's going on?",
            "What usually makes people {act_owe_d} at tax time even though their income stayed flat?",
            "Income unchanged, yet this filing season I {act_owe_d} — possible reasons?",
            "Explain how someone with a steady paycheck might {act_owe_d} when they file.",
        ),
    ),
    F(
        "claim_parent_d",
        "taxes",
        (
            "How do I {act_claim_d} my elderly mother as a dependent?",
            "Steps to {act_claim_d} a parent as a dependent on my tax return?",
            "What's the process if I want to {act_claim_d} my mom as my dependent?",
            "I support my aging mother financially — walk me through how to {act_claim_d} her on my 1040.",
            "{act_claim_d} my mother as a dependent: what do I need to do?",
        ),
    ),
    F(
        "pay_irs_d",
        "taxes",
        (
            "How do I pay my federal tax bill with {paymethod_d}?",
            "Paying the IRS using {paymethod_d} — what are the steps?",
            "What's the process for sending the money I owe the IRS through {paymethod_d}?",
            "Can you walk me through settling my balance due via {paymethod_d}?",
            "Covering my federal taxes with {paymethod_d}: how does that work?",
        ),
    ),
    # ----------------------------------------------------------- retirement
    F(
        "roth_withdraw_tax_d",
        "retirement",
        (
            "Are withdrawals from a {mod_roth_d} IRA taxed in retirement?",
            "Once I'm retired, do I owe income tax when I take money out of my {mod_roth_d} IRA?",
            "Pulling cash from a {mod_roth_d} IRA as a retiree: will the IRS tax it?",
            "How does the IRS handle {mod_roth_d} IRA payouts once you've stopped working?",
            "Tax on {mod_roth_d} IRA distributions during retirement?",
        ),
    ),
    F(
        "rollover_d",
        "retirement",
        (
            "How do I roll over my {acct_d} into a {acct_d2}?",
            "Steps to move money from a {acct_d} to a {acct_d2}?",
            "Can funds in my old {acct_d} be transferred into a {acct_d2}, and how?",
            "Rolling {acct_d} money into a {acct_d2}: what's the procedure?",
            "I want my {acct_d} balance sitting in a {acct_d2} instead. What do I do?",
        ),
    ),
    F(
        "contrib_limit_d",
        "retirement",
        (
            "What's the contribution limit for a {acct_d} {taxyear_d}?",
            "How much can I put into a {acct_d} {taxyear_d}?",
            "Max I'm allowed to contribute to my {acct_d} {taxyear_d}?",
            "{acct_d} annual cap {taxyear_d} — what's the number?",
            "Tell me the IRS ceiling on {acct_d} contributions {taxyear_d}.",
        ),
    ),
    F(
        "ss_claim_age_d",
        "retirement",
        (
            "How does claiming Social Security {ssage_d} change my monthly benefit?",
            "If I begin collecting Social Security {ssage_d}, what happens to the size of my check?",
            "Starting SS benefits {ssage_d}: bigger or smaller payments, and by how much?",
            "What share of my full retirement benefit would I get by filing for Social Security {ssage_d}?",
            "Effect on monthly Social Security payments of taking them {ssage_d}?",
        ),
    ),
    F(
        "early_cashout_d",
        "retirement",
        (
            "What taxes and penalties apply if I cash out my 401(k) {wdage_d}?",
            "Cashing out a 401(k) {wdage_d} — what will it cost me in tax and penalties?",
            "If I empty my 401(k) {wdage_d}, how much goes to the IRS?",
            "Withdrawing my whole 401k balance {wdage_d}: what are the tax consequences?",
            "Tax hit for liquidating a 401(k) {wdage_d}?",
        ),
    ),
    F(
        "saver_accounts_d",
        "retirement",
        (
            "Which retirement accounts [are|aren't] available to {saver_d}?",
            "What retirement plans [can|can't] {saver_d} open or join?",
            "{saver_d}: which tax-advantaged retirement options [are|are not] on the table?",
            "List the retirement savings vehicles that {saver_d} [have access to|are shut out of].",
            "Where [can|can't] {saver_d} save for retirement with tax breaks?",
        ),
    ),
    F(
        "roth_rules_d",
        "retirement",
        (
            "What rules apply when I {act_contrib_d} my Roth IRA?",
            "Before I {act_contrib_d} a Roth IRA, what restrictions should I know about?",
            "Roth IRA question: what are the limits and conditions to {act_contrib_d} one?",
            "Explain the IRS requirements for people who {act_contrib_d} a Roth IRA.",
            "I'm planning to {act_contrib_d} my Roth — any rules I need to follow?",
        ),
    ),
    F(
        "share_min_d",
        "retirement",
        (
            "What's the minimum investment for Vanguard {share_d}?",
            "How much money do I need to buy into a Vanguard fund's {share_d}?",
            "Vanguard {share_d}: is there a minimum to get started?",
            "Minimum buy-in required for the {share_d} at Vanguard?",
            "To hold {share_d} of a Vanguard index fund, what's the smallest amount I can invest?",
        ),
    ),
    F(
        "acct_holdings_d",
        "retirement",
        (
            "Which investments [are|aren't] allowed inside a {acct_d}?",
            "What assets [can|can't] I hold in a {acct_d}?",
            "{acct_d} rules: what kinds of holdings [are permitted|are prohibited]?",
            "Tell me what I [may|may not] invest in through my {acct_d}.",
            "Could you list the investment types a {acct_d} [accepts|won't accept]?",
        ),
    ),
    F(
        "penalty_exceptions_d",
        "retirement",
        (
            "Which early withdrawals from a {acct_d} [are|aren't] exempt from the 10% penalty?",
            "What reasons for tapping a {acct_d} before 59½ [avoid|still trigger] the early withdrawal penalty?",
            "{acct_d} early distributions: which situations [escape|don't escape] the extra 10% tax?",
            "When [can|can't] I take money out of my {acct_d} early without the 10% hit?",
            "List the life events that [waive|don't waive] the penalty on pulling from a {acct_d} too soon.",
        ),
    ),
    F(
        "match_quit_d",
        "retirement",
        (
            "What happens to my {mod_vested_d} 401(k) match if I quit?",
            "If I leave my job, do I keep the {mod_vested_d} employer contributions?",
            "Resigning soon — what becomes of the {mod_vested_d} company match in my 401k?",
            "Changing employers: is the {mod_vested_d} portion of my match mine to keep?",
            "Do {mod_vested_d} matching dollars stay in my account after I walk away from the company?",
        ),
    ),
    # --------------------------------------------------------------- crypto
    F(
        "stake_time_d",
        "crypto",
        (
            "How long does it take to {act_stake_d} {posc_d} on {exch_d}?",
            "If I {act_stake_d} my {posc_d} through {exch_d}, how many days until it's done?",
            "{exch_d}: what's the waiting period to {act_stake_d} {posc_d}?",
            "Timeline for when I {act_stake_d} {posc_d} using {exch_d}?",
            "I'm about to {act_stake_d} some {posc_d} on {exch_d} — how soon does that go through?",
        ),
    ),
    F(
        "nft_mint_d",
        "crypto",
        (
            "How do I {act_mint_d} an NFT on {chain_d} using {wallet_d}?",
            "Steps to {act_mint_d} an NFT on {chain_d} from my {wallet_d}?",
            "With {wallet_d} connected, what's the process to {act_mint_d} an NFT on {chain_d}?",
            "{chain_d} NFT question: how would I {act_mint_d} one with {wallet_d}?",
            "Walk me through how to {act_mint_d} a collectible NFT on {chain_d}, signing with {wallet_d}.",
        ),
    ),
    F(
        "bridge_usdc_d",
        "crypto",
        (
            "What's the cheapest way to bridge USDC from {chain_d} to {chain_d2}?",
            "Lowest-fee method to move USDC off {chain_d} and onto {chain_d2}?",
            "How can I transfer my USDC from {chain_d} over to {chain_d2} without paying much?",
            "Cheap bridge for sending USDC from {chain_d} across to {chain_d2}?",
            "I hold USDC on {chain_d} and need it on {chain_d2}. Which route costs the least?",
        ),
    ),
    F(
        "wallet_chains_d",
        "crypto",
        (
            "Which blockchains [does|doesn't] {wallet_d} support?",
            "What networks [can|can't] I use with {wallet_d}?",
            "{wallet_d}: which chains [are|aren't] compatible?",
            "List the crypto networks {wallet_d} [works with|doesn't work with].",
            "Thinking of using {wallet_d} — which blockchains [will|won't] it let me hold assets on?",
        ),
    ),
    F(
        "import_history_d",
        "crypto",
        (
            "How do I import my {exch_d} transaction history into {taxsoft_d}?",
            "Getting {exch_d} trades into {taxsoft_d}: what's the best way?",
            "Can you explain how to pull my {exch_d} activity into {taxsoft_d} for my crypto taxes?",
            "Steps to sync {exch_d} with {taxsoft_d}?",
            "I need my {exch_d} buys and sells to show up in {taxsoft_d}. How?",
        ),
    ),
    F(
        "report_sale_d",
        "crypto",
        (
            "How do I report a {mod_term_d} crypto sale {mod_gain_d} on my taxes?",
            "Crypto I'd held {mod_term_d} got sold {mod_gain_d} — how does that go on my return?",
            "Tax reporting for {mod_term_d} crypto sold {mod_gain_d}?",
            "What do I put on my tax return after selling a {mod_term_d} crypto position {mod_gain_d}?",
            "{mod_term_d} coin sale closed {mod_gain_d}: how should I report it to the IRS?",
        ),
    ),
    F(
        "hot_cold_d",
        "crypto",
        (
            "How safe is it to keep my crypto in a {mod_hotcold_d}?",
            "What are the security risks of storing coins in a {mod_hotcold_d}?",
            "Is a {mod_hotcold_d} a secure place for my crypto?",
            "Security-wise, what's the downside of holding tokens in a {mod_hotcold_d}?",
            "Safety check: parking my crypto in a {mod_hotcold_d}, good idea or not?",
        ),
    ),
    F(
        "exch_staking_d",
        "crypto",
        (
            "Which coins [can|can't] I stake on {exch_d}?",
            "What cryptocurrencies [are|aren't] available for staking on {exch_d}?",
            "{exch_d} staking: which assets [are supported|are not supported]?",
            "List the tokens {exch_d} [lets|doesn't let] me stake.",
            "Earning staking rewards on {exch_d} — which assets [qualify|don't qualify]?",
        ),
    ),
    F(
        "exch_access_d",
        "crypto",
        (
            "Which crypto exchanges [are|aren't] available to {cryptoaud_d}?",
            "What trading platforms [can|can't] {cryptoaud_d} sign up for?",
            "{cryptoaud_d} wanting to buy crypto: which exchanges [allow|block] them?",
            "Tell me which crypto apps [serve|don't serve] {cryptoaud_d}.",
            "Where [can|can't] {cryptoaud_d} legally open an account to trade crypto?",
        ),
    ),
    F(
        "buy_fees_d",
        "crypto",
        (
            "How much in fees would I pay to buy {cryptoamt_d} of Bitcoin on {exch_d}?",
            "Buying {cryptoamt_d} worth of Bitcoin on {exch_d} — what will the fees be?",
            "What does {exch_d} charge when I purchase {cryptoamt_d} in BTC?",
            "{exch_d} trading costs if I spend {cryptoamt_d} on Bitcoin?",
            "If I put {cryptoamt_d} into Bitcoin through {exch_d}, how much goes to fees?",
        ),
    ),
    F(
        "kraken_level_d",
        "crypto",
        (
            "What [can|can't] I do with a Kraken account at {kraken_d}?",
            "Kraken {kraken_d}: which features [are|aren't] unlocked?",
            "Which Kraken services [are available|are unavailable] once I reach {kraken_d}?",
            "On Kraken with {kraken_d}, what [am I allowed|am I not allowed] to do?",
            "List the things a Kraken account with {kraken_d} [can|cannot] access.",
        ),
    ),
    F(
        "deposit_confirm_d",
        "crypto",
        (
            "How many confirmations does a {coin_d} deposit need before {exch_d} credits it?",
            "{exch_d} just received my {coin_d} — how many network confirmations until it shows up?",
            "Number of block confirmations {exch_d} requires for incoming {coin_d}?",
            "I sent {coin_d} to {exch_d}. How many confirmations before it lands in my balance?",
            "What's the confirmation threshold {exch_d} uses for {coin_d} deposits?",
        ),
    ),
    # -------------------------------------------------------------- payroll
    F(
        "overtime_calc_d",
        "payroll",
        (
            "How much overtime do I owe an hourly employee in {usstate_d} who worked {hours_d} this week?",
            "{usstate_d} worker clocked {hours_d} in one week — how is their overtime calculated?",
            "My staffer in {usstate_d} put in {hours_d} last week. What OT pay are they due?",
            "Calculate overtime for a {usstate_d} hourly employee with {hours_d} in a single workweek.",
            "Overtime owed for {hours_d} worked in a week by a nonexempt employee based in {usstate_d}?",
        ),
    ),
    F(
        "ot_exempt_d",
        "payroll",
        (
            "Do {mod_exempt_d} employees have to be paid overtime?",
            "Is overtime required for {mod_exempt_d} staff under the FLSA?",
            "Overtime pay and {mod_exempt_d} workers — what does federal law say?",
            "When someone on my team is classified {mod_exempt_d}, am I obligated to pay them time and a half?",
            "{mod_exempt_d} classification: are extra hours paid at 1.5x?",
        ),
    ),
    F(
        "reciprocity_d",
        "payroll",
        (
            "My employee lives in {usstate_d} but works in {usstate_d2}. Which state's income tax should I withhold?",
            "Withholding question: worker resides in {usstate_d}, job site is in {usstate_d2} — which state gets the tax?",
            "For someone commuting from {usstate_d} to a job in {usstate_d2}, where does payroll withholding go?",
            "Which state do I withhold for if my staffer's home is in {usstate_d} and their office is in {usstate_d2}?",
            "Cross-border employee, {usstate_d} resident working in {usstate_d2}: how do I handle state withholding?",
        ),
    ),
    F(
        "pay_periods_d",
        "payroll",
        (
            "How many pay periods are in a year if we pay employees {payfreq_d}?",
            "Paying staff {payfreq_d} — how many paychecks is that annually?",
            "If my company runs payroll {payfreq_d}, how many paydays will we have in a year?",
            "Employees get paid {payfreq_d}. What's the annual count of pay periods?",
            "How many checks does a worker receive per year when payday comes {payfreq_d}?",
        ),
    ),
    F(
        "headcount_laws_d",
        "payroll",
        (
            "Which federal employment laws apply to a business with {staffcount_d}?",
            "We have {staffcount_d}. What federal labor rules are we covered by?",
            "Employer obligations at {staffcount_d}: which federal laws kick in?",
            "What HR and payroll laws does a company of {staffcount_d} need to follow at the federal level?",
            "Growing to {staffcount_d} — which federal requirements like the ACA or FMLA come into play?",
        ),
    ),
    F(
        "offcycle_bonus_d",
        "payroll",
        (
            "How do I run an off-cycle bonus payroll in {payrollsw_d}?",
            "Steps in {payrollsw_d} to pay a one-time bonus outside the regular schedule?",
            "{payrollsw_d}: how can I process a bonus check between normal pay runs?",
            "What's the way to set up a special bonus-only pay run using {payrollsw_d}?",
            "Need to send an employee a bonus off-schedule through {payrollsw_d}. How?",
        ),
    ),
    F(
        "gusto_features_d",
        "payroll",
        (
            "Which features [are|aren't] included in {gusto_tier_d}?",
            "What [do I get|don't I get] with {gusto_tier_d}?",
            "{gusto_tier_d}: what [comes with|is missing from] the plan?",
            "List what {gusto_tier_d} [offers|lacks].",
            "Comparing plans — which tools [does|doesn't] {gusto_tier_d} have?",
        ),
    ),
    F(
        "benefit_taxes_d",
        "payroll",
        (
            "Which payroll taxes [apply|don't apply] to {benefit_d}?",
            "What taxes [get|don't get] withheld on {benefit_d}?",
            "{benefit_d}: which employment taxes [are|aren't] owed on them?",
            "For {benefit_d}, which of FICA, FUTA and federal withholding [kick in|are skipped]?",
            "Tell me which withholdings [hit|don't hit] {benefit_d} on a paycheck.",
        ),
    ),
    F(
        "onboard_docs_d",
        "payroll",
        (
            "What paperwork do I need when I {act_onboard_d} an employee?",
            "Forms required to {act_onboard_d} a staff member?",
            "Checklist of documents for when we {act_onboard_d} someone on our team?",
            "I'm about to {act_onboard_d} a worker — which forms have to be filled out?",
            "Which HR and payroll documents are involved when you {act_onboard_d} an employee?",
        ),
    ),
    F(
        "pretax_effect_d",
        "payroll",
        (
            "How do {mod_pretax_d} deductions affect an employee's taxable wages?",
            "Do {mod_pretax_d} payroll deductions change the income that gets taxed?",
            "{mod_pretax_d} deductions from a paycheck: what do they do to taxable pay?",
            "Explain the impact of {mod_pretax_d} deductions on W-2 taxable income.",
            "When a benefit is taken out {mod_pretax_d}, how does that change which wages are taxed?",
        ),
    ),
    F(
        "worker_payroll_d",
        "payroll",
        (
            "How do I handle payroll taxes for {worker_d}?",
            "What are my withholding and reporting duties when paying {worker_d}?",
            "{worker_d}: how should payroll taxes be set up for them?",
            "Running payroll for {worker_d} — what do I need to know about taxes?",
            "Tax obligations an employer has for {worker_d}?",
        ),
    ),
    F(
        "paytax_wages_d",
        "payroll",
        (
            "Which kinds of pay [are|aren't] subject to {paytax_d}?",
            "What compensation [counts|doesn't count] as wages for {paytax_d}?",
            "{paytax_d}: which payments to employees [are|are not] taxable?",
            "List the types of employee pay that {paytax_d} [applies to|doesn't apply to].",
            "When I pay staff, which amounts [fall under|are excluded from] {paytax_d}?",
        ),
    ),
]


# ==== dining, wine, groceries, appliances (names end with _e) =====================================

_LEXICONS_E: dict[str, Lexicon] = {
    # ---- dining
    "bill_e": (
        "quantity",
        [("$38", "38 dollars"), ("$85", "85 dollars"), ("$240", "240 dollars")],
        False,
    ),
    "pct_e": (
        "quantity",
        [("15%", "15 percent"), ("18%", "18 percent"), ("22%", "22 percent")],
        False,
    ),
    "act_res_e": ("antonym", [("make",), ("scrap",)], True),
    "cuisine_e": ("entity", [("Burmese",), ("Peruvian",), ("Malaysian",), ("Laotian",)], False),
    "diner_e": (
        "audience",
        [
            ("a two-year-old", "a 2-year-old"),
            ("a pregnant woman", "an expecting mom"),
            ("a vegetarian",),
        ],
        False,
    ),
    "leftover_age_e": (
        "time",
        [("two days", "48 hours"), ("five days",), ("14 days", "fourteen days")],
        False,
    ),
    "venue_tier_e": (
        "tier",
        [
            ("a buffet",),
            ("a counter-service", "an order-at-the-counter"),
            ("a full-service", "a sit-down"),
        ],
        False,
    ),
    "mod_doneness_e": (
        "antonym",
        [("medium-rare", "medium rare"), ("medium-well", "medium well")],
        True,
    ),
    "act_eat_e": ("antonym", [("eat in", "dine in"), ("order takeout", "get takeout")], True),
    "dish_eat_e": (
        "entity",
        [
            ("soup dumplings", "xiao long bao"),
            ("oysters on the half shell",),
            ("a whole lobster",),
            ("injera",),
        ],
        False,
    ),
    # ---- wine
    "mod_body_e": ("antonym", [("full-bodied",), ("light-bodied",)], True),
    "mod_opened_e": (
        "antonym",
        [("already-opened", "uncorked"), ("still-corked", "never-opened")],
        True,
    ),
    "act_cork_e": ("antonym", [("uncork",), ("recork", "reseal")], True),
    "grape_e": (
        "entity",
        [("Nebbiolo",), ("Pinot Noir",), ("Zinfandel",), ("Syrah", "Shiraz")],
        False,
    ),
    "pair_dish_e": (
        "entity",
        [("Thai green curry",), ("grilled salmon",), ("dark chocolate",), ("blue cheese",)],
        False,
    ),
    "guests_e": (
        "quantity",
        [("35", "thirty-five"), ("60", "sixty"), ("150", "a hundred and fifty")],
        False,
    ),
    "party_len_e": (
        "time",
        [("two-hour", "2-hour"), ("four-hour", "4-hour"), ("six-hour", "6-hour")],
        False,
    ),
    "cook_wine_e": (
        "entity",
        [("Marsala",), ("dry sherry",), ("dry vermouth",), ("Madeira",)],
        False,
    ),
    "rioja_tier_e": ("tier", [("Crianza",), ("Reserva",), ("Gran Reserva",)], False),
    "wine_aud_e": (
        "audience",
        [
            ("a wine novice", "someone new to wine"),
            ("a serious collector", "a seasoned collector"),
            ("a broke college student",),
        ],
        False,
    ),
    # ---- groceries
    "act_freeze_e": ("antonym", [("freeze",), ("thaw", "defrost")], True),
    "mod_ripe_e": ("antonym", [("ripe",), ("unripe", "underripe")], True),
    "mod_salt_e": ("antonym", [("salted",), ("unsalted",)], True),
    "grocer_e": ("entity", [("Aldi",), ("Trader Joe's",), ("Kroger",), ("Publix",)], False),
    "veg_e": (
        "entity",
        [("asparagus",), ("cilantro", "fresh coriander"), ("mushrooms",), ("celery",)],
        False,
    ),
    "month_e": (
        "time",
        [("in mid-September",), ("in late May",), ("in the dead of winter",)],
        False,
    ),
    "eaters_e": ("quantity", [("7", "seven"), ("18", "eighteen"), ("65", "sixty-five")], False),
    "fat_e": (
        "entity",
        [("lard",), ("coconut oil",), ("margarine",), ("vegetable shortening", "shortening")],
        False,
    ),
    "household_e": (
        "audience",
        [
            ("a college student living alone",),
            ("a retired couple",),
            ("a family with three teenagers",),
        ],
        False,
    ),
    # ---- appliances
    "act_temp_e": ("antonym", [("crank up", "bump up"), ("dial down", "knock down")], True),
    "mod_loader_e": (
        "antonym",
        [("front-loading", "front-load"), ("top-loading", "top-load")],
        True,
    ),
    "mod_fuel_e": ("antonym", [("gas",), ("electric coil",)], True),
    "appliance_e": (
        "entity",
        [
            ("chest freezer",),
            ("dehumidifier",),
            ("window air conditioner", "window AC unit"),
            ("wine cooler",),
        ],
        False,
    ),
    "brand_e": ("entity", [("Bosch",), ("Whirlpool",), ("Miele",), ("Frigidaire",)], False),
    "fridge_age_e": (
        "time",
        [("three years", "3 years"), ("nine years", "9 years"), ("sixteen years", "16 years")],
        False,
    ),
    "watts_e": ("quantity", [("700",), ("1,100", "1100"), ("1,500", "1500")], False),
    "nsf_e": (
        "tier",
        [("NSF 42", "NSF/ANSI 42"), ("NSF 53", "NSF/ANSI 53"), ("NSF 401", "NSF/ANSI 401")],
        False,
    ),
    "appl_aud_e": (
        "audience",
        [
            ("seniors with arthritis", "older adults with arthritic hands"),
            ("college dorm residents", "students in a dorm"),
            ("families with toddlers", "parents of toddlers"),
        ],
        False,
    ),
    # ---- slots for the polarity families
    "dress_e": (
        "tier",
        [("smart casual",), ("business casual",), ("cocktail",), ("jacket-required",)],
        False,
    ),
    "meal_e": ("time", [("brunch",), ("happy hour",), ("weekday lunch",)], False),
    "region_e": ("entity", [("Bordeaux",), ("Burgundy",), ("Rhône", "Rhone"), ("Tuscan",)], False),
    "wine_country_e": (
        "entity",
        [("South African",), ("Chilean",), ("New Zealand",), ("Argentine", "Argentinian")],
        False,
    ),
    "food_cat_e": (
        "entity",
        [("condiments",), ("tropical fruits",), ("root vegetables",), ("baked goods",)],
        False,
    ),
    "organic_cat_e": (
        "entity",
        [("dairy products",), ("leafy greens",), ("berries",), ("meats",)],
        False,
    ),
    "bb_lag_e": (
        "time",
        [("a week", "seven days"), ("three months", "3 months"), ("a full year", "twelve months")],
        False,
    ),
    "ware_e": (
        "entity",
        [("knives",), ("pots and pans",), ("plastic tubs",), ("wooden utensils",)],
        False,
    ),
    "af_food_e": (
        "entity",
        [("vegetables",), ("seafood dishes",), ("desserts",), ("frozen snacks",)],
        False,
    ),
    "room_e": ("entity", [("kitchen",), ("home office",), ("laundry room",), ("garage",)], False),
}

_FAMILIES_E = [
    # ================================================================ dining
    F(
        "tip_math_e",
        "dining",
        (
            "How much is a tip of {pct_e} on a restaurant bill of {bill_e}?",
            "Our dinner check came to {bill_e}. How much should I leave if I'm tipping {pct_e}?",
            "Quick math please: {pct_e} gratuity when the meal total is {bill_e}.",
            "If the server's tab says {bill_e}, what amount equals {pct_e} of that for the tip?",
            "Figure out {pct_e} of {bill_e} for me so I know what to add for the waiter.",
        ),
    ),
    F(
        "reservation_notice_e",
        "dining",
        (
            "How far in advance should I {act_res_e} a reservation at an upscale restaurant?",
            "Fine-dining etiquette: how much notice is expected if you {act_res_e} a booking for dinner?",
            "Fancy place downtown, table for two. What lead time is normal to {act_res_e} the reservation?",
            "When is it considered polite to {act_res_e} a dinner booking at a high-end spot — days ahead or weeks?",
        ),
    ),
    F(
        "allergy_menu_e",
        "dining",
        (
            "Which dishes at a {cuisine_e} restaurant [usually contain|are usually free of] peanuts?",
            "Peanut allergy question: on a typical {cuisine_e} menu, what items [tend to have peanuts in them|tend to be peanut-free]?",
            "Ordering {cuisine_e} food with a nut-allergic kid — list the staples that [include peanuts|don't include peanuts].",
            "What {cuisine_e} restaurant classics are generally [made with|made without] groundnuts?",
        ),
    ),
    F(
        "dress_code_e",
        "dining",
        (
            "What [counts|doesn't count] as {dress_e} attire for a restaurant dinner?",
            "The restaurant says the dress code is {dress_e}. Which outfits [are acceptable|are not acceptable]?",
            "Give me examples of clothes that [meet|fail] a {dress_e} dining dress code.",
            "{dress_e} dinner tonight: what [is fine to wear|should I avoid wearing]?",
        ),
    ),
    F(
        "prix_fixe_e",
        "dining",
        (
            "Which menu items [are|aren't] typically served during {meal_e} at restaurants?",
            "Going out for {meal_e}: what [can I usually order|is usually unavailable]?",
            "Restaurants at {meal_e} — what dishes [do they tend to offer|do they tend to skip]?",
            "List the kinds of food a typical place [has on the menu|leaves off the menu] for {meal_e}.",
        ),
    ),
    F(
        "steakhouse_order_e",
        "dining",
        (
            "What should I order at a steakhouse for {diner_e}?",
            "Taking {diner_e} out to a steak restaurant — which menu items make sense?",
            "Steakhouse dinner with {diner_e} at the table: good dishes to pick for them?",
            "Suggest meals from a chophouse menu that would suit {diner_e}.",
        ),
    ),
    F(
        "leftovers_age_e",
        "dining",
        (
            "Is it safe to eat restaurant leftovers after {leftover_age_e} in the fridge?",
            "My takeout container has been refrigerated for {leftover_age_e} — still OK to eat?",
            "Doggy bag from dinner, {leftover_age_e} in the refrigerator. Toss it or finish it?",
            "Can food brought home from a restaurant still be eaten once it's sat chilled for {leftover_age_e}?",
        ),
    ),
    F(
        "venue_tip_e",
        "dining",
        (
            "How much should I tip at {venue_tier_e} restaurant?",
            "What's the customary gratuity when eating at {venue_tier_e} place?",
            "Tipping etiquette for {venue_tier_e} eatery — what percent is normal?",
            "At {venue_tier_e} joint, how much do people usually leave for the staff?",
        ),
    ),
    F(
        "doneness_look_e",
        "dining",
        (
            "What should the inside of a {mod_doneness_e} steak look like when it arrives at the table?",
            "Ordered my ribeye {mod_doneness_e} — what color and texture should I expect when I cut in?",
            "Describe how a properly cooked {mod_doneness_e} steak appears on the plate.",
            "Steakhouse newbie here: how can I tell if the steak they served is actually {mod_doneness_e}?",
        ),
    ),
    F(
        "tip_takeout_e",
        "dining",
        (
            "Should I tip when I {act_eat_e} at a restaurant?",
            "Is a gratuity expected if you {act_eat_e}?",
            "Do servers expect a tip when customers {act_eat_e}, and how much?",
            "Restaurant etiquette: what's the right tip amount when we {act_eat_e}?",
        ),
    ),
    F(
        "eat_properly_e",
        "dining",
        (
            "How do you properly eat {dish_eat_e} at a restaurant?",
            "Never had {dish_eat_e} before — what's the right technique at the table?",
            "Etiquette for tackling {dish_eat_e} without making a mess?",
            "Show me the correct way to enjoy {dish_eat_e} when dining out.",
        ),
    ),
    # ================================================================ wine
    F(
        "serve_temp_e",
        "wine",
        (
            "What temperature should {mod_body_e} red wine be served at?",
            "Ideal serving temp for a {mod_body_e} red?",
            "I'm pouring a {mod_body_e} red tonight. How cool should the bottle be?",
            "Should a {mod_body_e} red go in the fridge before dinner, and to how many degrees?",
        ),
    ),
    F(
        "opened_keep_e",
        "wine",
        (
            "How long does {mod_opened_e} wine stay good?",
            "Shelf life of {mod_opened_e} wine bottles?",
            "I've got some {mod_opened_e} wine in the kitchen — how many days or years before it goes off?",
            "When does {mod_opened_e} wine start to spoil?",
        ),
    ),
    F(
        "cork_bubbly_e",
        "wine",
        (
            "How do I {act_cork_e} a bottle of champagne safely?",
            "What's the trick to {act_cork_e} sparkling wine without special gear?",
            "Prosecco in hand, no gadgets: best way to {act_cork_e} it?",
            "Tips to {act_cork_e} a bottle of bubbly without losing fizz or hurting anyone.",
        ),
    ),
    F(
        "decant_time_e",
        "wine",
        (
            "How long should I decant a {grape_e}?",
            "Does a {grape_e} need time in a decanter, and for how many hours?",
            "Opening a {grape_e} for dinner — how long should it breathe in the carafe first?",
            "Decanting guide for {grape_e}: minutes or hours?",
        ),
    ),
    F(
        "food_pairing_e",
        "wine",
        (
            "Which wines [pair well|clash] with {pair_dish_e}?",
            "Hosting dinner with {pair_dish_e} on the menu — what bottles [would complement it|would be a poor match]?",
            "Wine styles that [go nicely with|taste bad next to] {pair_dish_e}?",
            "Recommend grapes that [suit|you'd avoid serving with] {pair_dish_e}.",
        ),
    ),
    F(
        "needs_breathe_e",
        "wine",
        (
            "Which {region_e} reds [need|don't need] to breathe before drinking?",
            "What kinds of {region_e} red wine [benefit from aeration|are best poured straight from the bottle]?",
            "Decanter or not: list the {region_e} reds that [should be given air first|can be served right after opening].",
            "Tell me which {region_e} red bottles [improve with some air time|gain nothing from air time].",
        ),
    ),
    F(
        "improve_age_e",
        "wine",
        (
            "Which {wine_country_e} wines [improve|don't improve] with age?",
            "What {wine_country_e} wines [get better|get worse or stay flat] if I cellar them for years?",
            "Building a cellar of {wine_country_e} bottles: which styles are [worth laying down|meant to be drunk young]?",
            "Name the {wine_country_e} wines that [reward long aging|should be opened within a year or two].",
        ),
    ),
    F(
        "party_bottles_e",
        "wine",
        (
            "How many bottles of wine do I need for {guests_e} guests at a {party_len_e} party?",
            "Planning a {party_len_e} reception for {guests_e} people. How much wine should I buy?",
            "Wine estimate: {guests_e} attendees, {party_len_e} event — number of bottles?",
            "Throwing a {party_len_e} bash with {guests_e} invitees; how many 750 ml bottles should I stock?",
        ),
    ),
    F(
        "cooking_wine_swap_e",
        "wine",
        (
            "Can I use {cook_wine_e} instead of {cook_wine_e2} in a pan sauce?",
            "My recipe calls for {cook_wine_e2} but I only have {cook_wine_e}. Will it work?",
            "Out of {cook_wine_e2} — is {cook_wine_e} an acceptable substitute in a sauce?",
            "Swapping {cook_wine_e2} for {cook_wine_e} in a deglazing step: good idea or not?",
        ),
    ),
    F(
        "rioja_aging_e",
        "wine",
        (
            "What are the minimum aging rules for a Rioja labeled {rioja_tier_e}?",
            "How long does a {rioja_tier_e} Rioja have to spend in oak and bottle before release?",
            "Spanish wine labels: what does {rioja_tier_e} on a Rioja tell me about its aging?",
            "Rioja {rioja_tier_e} — how many years in barrel and in bottle are required?",
        ),
    ),
    F(
        "wine_gift_e",
        "wine",
        (
            "What's a good bottle of wine to give as a gift to {wine_aud_e}?",
            "Gift idea: wine for {wine_aud_e}. What should I buy?",
            "Shopping for {wine_aud_e} — which bottle would make a nice present?",
            "Recommend a wine present that {wine_aud_e} would appreciate.",
        ),
    ),
    # ================================================================ groceries
    F(
        "freeze_chicken_e",
        "groceries",
        (
            "What's the safest way to {act_freeze_e} raw chicken breasts?",
            "How should I {act_freeze_e} a pack of chicken breasts from the store?",
            "Bought a family pack of chicken. Best method to {act_freeze_e} it without risking food poisoning?",
            "Food safety steps to {act_freeze_e} uncooked chicken at home?",
        ),
    ),
    F(
        "avocado_fridge_e",
        "groceries",
        (
            "Should {mod_ripe_e} avocados go in the fridge?",
            "Where do I keep {mod_ripe_e} avocados — counter or refrigerator?",
            "Just got home with some {mod_ripe_e} avocados. Chill them or leave them out?",
            "Storage question about {mod_ripe_e} avocados: is refrigeration a good idea?",
        ),
    ),
    F(
        "butter_counter_e",
        "groceries",
        (
            "How long can {mod_salt_e} butter sit out on the counter?",
            "Is it OK to keep {mod_salt_e} butter in a butter dish at room temperature, and for how long?",
            "Leaving a stick of {mod_salt_e} butter unrefrigerated — when does it go bad?",
            "{mod_salt_e} butter outside the fridge: how many days is safe?",
        ),
    ),
    F(
        "fridge_or_not_e",
        "groceries",
        (
            "Which {food_cat_e} [should|shouldn't] be stored in the refrigerator?",
            "Unpacking groceries: what {food_cat_e} [belong in the fridge|should stay out of the fridge]?",
            "List the {food_cat_e} that [need refrigeration|do better at room temperature].",
            "Among {food_cat_e}, which ones [go bad faster|keep better] if you leave them out of the fridge?",
        ),
    ),
    F(
        "organic_worth_e",
        "groceries",
        (
            "Which {organic_cat_e} [are|aren't] worth buying organic?",
            "On a budget: what {organic_cat_e} [should I pay extra to get organic|are fine to buy conventional]?",
            "Tell me the {organic_cat_e} where the organic label [matters most|matters least].",
            "For which {organic_cat_e} [does|doesn't] going organic really make a difference?",
        ),
    ),
    F(
        "best_by_e",
        "groceries",
        (
            "Which grocery foods [are|are not] safe to eat {bb_lag_e} past the best-by date?",
            "What store-bought items [can|shouldn't] be eaten {bb_lag_e} after the date printed on the package?",
            "Label expired {bb_lag_e} ago: which products [are usually still fine|should be thrown out]?",
            "Give me a list of groceries that [stay good|turn risky] {bb_lag_e} beyond the best-before date.",
        ),
    ),
    F(
        "grocer_returns_e",
        "groceries",
        (
            "What is the return policy on produce at {grocer_e}?",
            "Can I take bad fruit back to {grocer_e} for a refund?",
            "Bought spoiled veggies at {grocer_e}. How does their refund or replacement policy work?",
            "Returning groceries at {grocer_e}: do they need a receipt, and what do they give back?",
        ),
    ),
    F(
        "store_veg_e",
        "groceries",
        (
            "What's the best way to store {veg_e} for maximum freshness?",
            "Best way to keep {veg_e} from wilting or going slimy in the fridge?",
            "Got {veg_e} at the market today. Which storage method gives the longest life?",
            "Extend the shelf life of {veg_e}: container, water, paper towel, or something else?",
        ),
    ),
    F(
        "in_season_e",
        "groceries",
        (
            "Which fruits and vegetables are in season {month_e}?",
            "What produce is at its peak {month_e} in the US?",
            "Shopping list help: what's cheapest and freshest at the farmers market {month_e}?",
            "Seasonal eating — tell me what to buy at the grocery store {month_e}.",
        ),
    ),
    F(
        "rice_amount_e",
        "groceries",
        (
            "How much uncooked rice should I buy to feed {eaters_e} people?",
            "Cooking rice for {eaters_e} — how many cups dry do I need?",
            "Quantity of raw rice for a meal serving {eaters_e}?",
            "I'm making a rice side dish for {eaters_e} guests. What amount do I measure out before cooking?",
        ),
    ),
    F(
        "baking_fat_swap_e",
        "groceries",
        (
            "Can I use {fat_e} instead of {fat_e2} in cookies?",
            "The store was out of {fat_e2}, so I bought {fat_e}. Will my cookie recipe still work?",
            "Substituting {fat_e} for {fat_e2} in a cookie dough: what changes?",
            "Cookie recipe calls for {fat_e2}; I've only got {fat_e} — is the swap OK?",
        ),
    ),
    F(
        "grocery_budget_e",
        "groceries",
        (
            "What's a reasonable weekly grocery budget for {household_e}?",
            "How much should {household_e} spend on food shopping per week?",
            "Typical supermarket bill each week for {household_e}?",
            "Help me set a weekly food budget — it's for {household_e}.",
        ),
    ),
    # ================================================================ appliances
    F(
        "fridge_temp_e",
        "appliances",
        (
            "How do I {act_temp_e} the temperature on my refrigerator?",
            "Which way do I turn the fridge dial to {act_temp_e} the temp inside?",
            "Need to {act_temp_e} my fridge's internal temp. What setting do I change, and to what number?",
            "Refrigerator thermostat: what's the right adjustment to {act_temp_e} the temperature a few degrees?",
        ),
    ),
    F(
        "washer_clean_e",
        "appliances",
        (
            "How do I deep-clean a {mod_loader_e} washing machine?",
            "My {mod_loader_e} washer smells musty. What's the best way to clean it out?",
            "Cleaning routine for a {mod_loader_e} washer — what parts need attention?",
            "Get rid of mildew and gunk in a {mod_loader_e} clothes washer: step by step?",
        ),
    ),
    F(
        "stove_burners_e",
        "appliances",
        (
            "How do I clean the burners on my {mod_fuel_e} stove?",
            "Best way to get baked-on grime off {mod_fuel_e} range burners?",
            "My {mod_fuel_e} cooktop's burners are crusty with spills. How should I scrub them?",
            "Cleaning tips for the burner parts on my {mod_fuel_e} stovetop?",
        ),
    ),
    F(
        "appliance_power_e",
        "appliances",
        (
            "How much electricity does a {appliance_e} use per month?",
            "Monthly kWh consumption of a typical {appliance_e}?",
            "What does running a {appliance_e} add to my power bill each month?",
            "Estimate the energy draw of a {appliance_e} over 30 days.",
        ),
    ),
    F(
        "reset_button_e",
        "appliances",
        (
            "Where is the reset button on a {brand_e} dishwasher?",
            "How do I reset my {brand_e} dishwasher?",
            "{brand_e} dishwasher stopped mid-cycle and blinks — how do I do a reset?",
            "Reboot procedure for a {brand_e} dishwasher that won't start?",
        ),
    ),
    F(
        "fridge_repair_e",
        "appliances",
        (
            "My fridge is {fridge_age_e} old and the compressor died. Repair it or replace it?",
            "Is it worth fixing a refrigerator that's {fridge_age_e} old with a failed compressor?",
            "Compressor went out on a refrigerator that's {fridge_age_e} old. Should I pay for the repair?",
            "Fix or buy new: dead compressor, fridge bought {fridge_age_e} ago.",
        ),
    ),
    F(
        "microwave_amps_e",
        "appliances",
        (
            "How many amps does a {watts_e}-watt microwave draw?",
            "Current draw in amps for a {watts_e} W microwave on a 120 V outlet?",
            "Plugging in a {watts_e}-watt microwave — how much current does it pull from the outlet?",
            "Microwave rated at {watts_e} watts: what amperage should I expect?",
        ),
    ),
    F(
        "dishwasher_safe_e",
        "appliances",
        (
            "Which {ware_e} [can|can't] go in the dishwasher?",
            "What kinds of {ware_e} are [dishwasher-safe|ruined by the dishwasher]?",
            "Loading the dishwasher: which {ware_e} [can I put in it|should I always wash by hand instead]?",
            "Tell me which {ware_e} [survive|don't survive] a dishwasher cycle.",
        ),
    ),
    F(
        "air_fryer_foods_e",
        "appliances",
        (
            "What {af_food_e} [cook well|should never be cooked] in an air fryer?",
            "Air fryer newbie: which {af_food_e} [turn out great|are a bad idea] in it?",
            "List {af_food_e} [worth making|you shouldn't try to make] in an air fryer.",
            "Which {af_food_e} [work well|fail or make a mess] in a countertop air fryer?",
        ),
    ),
    F(
        "surge_protector_e",
        "appliances",
        (
            "Which {room_e} appliances [should|shouldn't] be plugged into a surge protector?",
            "What {room_e} devices [belong on|should be kept off] a power strip with surge protection?",
            "Surge strip question: which things in my {room_e} [are good to connect to it|need their own wall outlet instead]?",
            "Tell me what {room_e} equipment [benefits from being run|must never be run] through a surge protector.",
        ),
    ),
    F(
        "water_filter_e",
        "appliances",
        (
            "What [does|doesn't] an {nsf_e} certified refrigerator water filter remove?",
            "Fridge filter rated {nsf_e}: which contaminants [does it take out|does it leave in the water]?",
            "Replacement filter for my refrigerator says {nsf_e}. What [will it filter|won't it filter]?",
            "Explain what an {nsf_e} rating on a fridge water cartridge [covers|doesn't cover].",
        ),
    ),
    F(
        "microwave_features_e",
        "appliances",
        (
            "Which microwave features matter most for {appl_aud_e}?",
            "Buying a microwave for {appl_aud_e} — what should I look for?",
            "Best microwave design choices for {appl_aud_e}?",
            "Help me pick a microwave suited to {appl_aud_e}: which controls and features count?",
        ),
    ),
]


# ==== cloud, databases, web hosting, security (names end with _f) =================================

_LEXICONS_F: dict[str, Lexicon] = {
    # ---- antonyms ----
    "act_scale_f": ("antonym", [("scale up",), ("scale down",)], True),
    "act_mount_f": ("antonym", [("mount",), ("unmount",)], True),
    "mod_spot_f": (
        "antonym",
        [("spot instances", "spot VMs"), ("on-demand instances", "on-demand VMs")],
        True,
    ),
    "mod_clustered_f": ("antonym", [("clustered",), ("nonclustered", "non-clustered")], True),
    "act_norm_f": ("antonym", [("normalize", "normalise"), ("denormalize", "denormalise")], True),
    "mod_softdel_f": (
        "antonym",
        [("soft deletes", "soft deletion"), ("hard deletes", "hard deletion")],
        True,
    ),
    "mod_join_f": (
        "antonym",
        [("LEFT JOIN", "left outer join"), ("RIGHT JOIN", "right outer join")],
        True,
    ),
    "mod_cert_f": (
        "antonym",
        [
            ("wildcard certificate", "wildcard cert"),
            ("single-domain certificate", "single-domain cert"),
        ],
        True,
    ),
    "mod_proxy_f": ("antonym", [("reverse proxy",), ("forward proxy",)], True),
    "mod_www_f": (
        "antonym",
        [
            ("from www to the bare domain", "from www to non-www"),
            ("from the bare domain to www", "from non-www to www"),
        ],
        True,
    ),
    "mod_sym_f": ("antonym", [("symmetric", "symmetric-key"), ("asymmetric", "public-key")], True),
    "mod_box_f": ("antonym", [("white-box", "clear-box"), ("black-box",)], True),
    "mod_ingress_f": ("antonym", [("ingress",), ("egress",)], True),
    "mod_state_f": ("antonym", [("stateful",), ("stateless",)], True),
    # ---- entities ----
    "cloudprov_f": (
        "entity",
        [
            ("AWS", "Amazon Web Services"),
            ("Azure", "Microsoft Azure"),
            ("Google Cloud", "GCP", "Google Cloud Platform"),
            ("Oracle Cloud", "OCI", "Oracle Cloud Infrastructure"),
        ],
        False,
    ),
    "fnsvc_f": (
        "entity",
        [
            ("AWS Lambda", "Lambda"),
            ("Azure Functions",),
            ("Google Cloud Functions", "Cloud Functions"),
            ("Cloudflare Workers",),
        ],
        False,
    ),
    "warehouse_f": (
        "entity",
        [
            ("ClickHouse",),
            ("Snowflake",),
            ("BigQuery", "Google BigQuery"),
            ("Amazon Redshift", "Redshift"),
        ],
        False,
    ),
    "rdbms_f": (
        "entity",
        [
            ("MariaDB",),
            ("SQL Server", "Microsoft SQL Server", "MSSQL"),
            ("CockroachDB",),
            ("IBM Db2", "Db2"),
        ],
        False,
    ),
    "host_f": (
        "entity",
        [("Bluehost",), ("SiteGround",), ("HostGator",), ("Hostinger",), ("DreamHost",)],
        False,
    ),
    "cms_f": ("entity", [("WordPress",), ("Drupal",), ("Joomla",), ("Ghost",)], False),
    "dnsrec_f": (
        "entity",
        [
            ("a CNAME record", "a canonical name record"),
            ("an MX record", "a mail exchanger record"),
            ("a TXT record", "a text record"),
            ("an AAAA record", "an IPv6 address record"),
            ("an SRV record", "a service record"),
        ],
        False,
    ),
    "attack_f": (
        "entity",
        [
            ("SQL injection", "SQLi"),
            ("cross-site scripting", "XSS"),
            ("cross-site request forgery", "CSRF"),
            ("server-side request forgery", "SSRF"),
            ("clickjacking", "UI redressing"),
        ],
        False,
    ),
    "mfa_f": (
        "entity",
        [
            ("SMS one-time codes", "text-message codes"),
            ("authenticator app codes", "TOTP codes"),
            ("FIDO2 security keys", "hardware security keys"),
            ("push-notification approvals", "push MFA prompts"),
        ],
        False,
    ),
    "srvrole_f": (
        "entity",
        [
            ("mail server", "email server"),
            ("DNS server", "name server"),
            ("VPN gateway", "VPN concentrator"),
            ("bastion host", "jump box"),
        ],
        False,
    ),
    "framework_f": (
        "entity",
        [("SOC 2",), ("ISO 27001", "ISO/IEC 27001"), ("PCI DSS", "PCI-DSS"), ("FedRAMP",)],
        False,
    ),
    # ---- audiences ----
    "cloudaud_f": (
        "audience",
        [
            ("data engineers",),
            ("network engineers", "networking engineers"),
            ("project managers",),
            ("accountants",),
        ],
        False,
    ),
    "dbaud_f": (
        "audience",
        [
            ("backend developers", "backend devs"),
            ("data analysts",),
            ("site reliability engineers", "SREs"),
            ("data scientists",),
        ],
        False,
    ),
    "siteaud_f": (
        "audience",
        [
            ("photographers",),
            ("restaurant owners",),
            ("nonprofits", "nonprofit organizations"),
            ("real estate agents", "realtors"),
        ],
        False,
    ),
    "secaud_f": (
        "audience",
        [
            ("hospital staff", "healthcare workers"),
            ("accounts payable clerks", "AP clerks"),
            ("software engineers",),
            ("C-suite executives", "senior executives"),
        ],
        False,
    ),
    # ---- time ----
    "keep_f": (
        "time",
        [
            ("for 14 days", "for two weeks"),
            ("for 6 months", "for half a year"),
            ("for 10 years", "for ten years"),
        ],
        False,
    ),
    "undrop_f": (
        "time",
        [
            ("an hour later", "60 minutes later"),
            ("three days later", "72 hours later"),
            ("two weeks later", "14 days later"),
            ("six months later", "half a year later"),
        ],
        False,
    ),
    "expired_f": (
        "time",
        [
            ("a week ago", "7 days ago"),
            ("50 days ago", "about seven weeks ago"),
            ("four months ago", "120 days ago"),
        ],
        False,
    ),
    "irtime_f": (
        "time",
        [
            ("in the first hour", "within the first 60 minutes"),
            ("on the second day", "on day two"),
            ("a month", "four weeks"),
        ],
        False,
    ),
    # ---- tiers ----
    "storeclass_f": (
        "tier",
        [
            ("S3 Standard",),
            ("S3 Standard-IA", "S3 Standard-Infrequent Access"),
            ("S3 Glacier Flexible Retrieval", "Glacier Flexible Retrieval"),
            ("S3 Glacier Deep Archive", "Glacier Deep Archive"),
        ],
        False,
    ),
    "support_f": (
        "tier",
        [
            ("Developer Support",),
            ("Business Support",),
            ("Enterprise On-Ramp",),
            ("Enterprise Support",),
        ],
        False,
    ),
    "azsql_f": ("tier", [("General Purpose",), ("Business Critical",), ("Hyperscale",)], False),
    "hostplan_f": (
        "tier",
        [
            ("shared hosting", "a shared hosting plan"),
            ("a VPS", "a virtual private server"),
            ("a dedicated server", "dedicated hosting"),
            ("managed WordPress hosting", "a managed WordPress plan"),
        ],
        False,
    ),
    "cfplan_f": (
        "tier",
        [
            ("Cloudflare Free",),
            ("Cloudflare Pro",),
            ("Cloudflare Business",),
            ("Cloudflare Enterprise",),
        ],
        False,
    ),
    # ---- quantities ----
    "vcpu_f": (
        "quantity",
        [
            ("2 vCPUs", "two vCPUs"),
            ("16 vCPUs", "sixteen vCPUs"),
            ("48 vCPUs", "forty-eight vCPUs"),
            ("192 vCPUs",),
        ],
        False,
    ),
    "rows_f": (
        "quantity",
        [
            ("50,000 rows", "fifty thousand rows"),
            ("20 million rows", "twenty million rows"),
            ("3 billion rows", "three billion rows"),
        ],
        False,
    ),
    "traffic_f": (
        "quantity",
        [
            ("300 visitors a month", "three hundred monthly visitors"),
            ("80,000 visitors a month", "eighty thousand monthly visitors"),
            ("3 million visitors a month", "three million monthly visitors"),
        ],
        False,
    ),
    "rsakey_f": ("quantity", [("1024-bit",), ("2048-bit",), ("3072-bit",), ("4096-bit",)], False),
}

_FAMILIES_F = [
    # ================= cloud =================
    F(
        "always_free_f",
        "cloud",
        (
            "Which {cloudprov_f} services [are|are not] part of the always-free offering?",
            "List the {cloudprov_f} products that [I can keep using at no cost forever|would eventually start billing me].",
            "Free-forever stuff on {cloudprov_f}: what [is covered|isn't covered]?",
            "If I only stay within {cloudprov_f}'s permanent free allowance, which services [cost nothing|still show up on the invoice]?",
            "Perpetual free usage on {cloudprov_f} — which offerings [qualify|don't qualify]?",
        ),
    ),
    F(
        "node_pool_f",
        "cloud",
        (
            "What's the safest way to {act_scale_f} a Kubernetes node pool without dropping traffic?",
            "I need to {act_scale_f} our k8s worker pool. How do I avoid any downtime?",
            "Zero-downtime procedure to {act_scale_f} the nodes backing a cluster?",
            "Keeping production requests flowing, how would you {act_scale_f} the machines in a Kubernetes node group?",
            "k8s node pool: best practice to {act_scale_f} the pool while it serves live traffic?",
        ),
    ),
    F(
        "vm_migrate_f",
        "cloud",
        (
            "What's the best tool for migrating virtual machines from {cloudprov_f} to {cloudprov_f2}?",
            "We're leaving {cloudprov_f} for {cloudprov_f2} — how should we lift and shift our VMs?",
            "Lift-and-shift with {cloudprov_f} as the source and {cloudprov_f2} as the destination: which migration service handles the servers?",
            "Which service moves my servers off {cloudprov_f} and onto {cloudprov_f2} with the least effort?",
        ),
    ),
    F(
        "early_delete_f",
        "cloud",
        (
            "What's the minimum storage duration I get charged for in {storeclass_f}?",
            "If I delete an object early from {storeclass_f}, how many days am I still billed for?",
            "{storeclass_f} — how long must data sit there before removing it stops triggering an early-deletion fee?",
            "Early deletion penalty on {storeclass_f}: what's the minimum number of days?",
        ),
    ),
    F(
        "ec2_vcpu_f",
        "cloud",
        (
            "Which EC2 instance types have exactly {vcpu_f}?",
            "List the Amazon EC2 sizes that give me {vcpu_f}, no more and no less.",
            "Looking for a virtual server on AWS with precisely {vcpu_f} — what are my instance options?",
            "EC2 types offering {vcpu_f} exactly: which ones are there?",
        ),
    ),
    F(
        "cloud_cert_f",
        "cloud",
        (
            "Which cloud certification should {cloudaud_f} go for first?",
            "Recommend a starting cloud cert for {cloudaud_f}.",
            "For {cloudaud_f} breaking into cloud computing, what's the best first credential to earn?",
            "First cloud exam for {cloudaud_f}: what do you suggest?",
            "What certificate makes the most sense as an entry point into the cloud for {cloudaud_f}?",
        ),
    ),
    F(
        "fn_runtimes_f",
        "cloud",
        (
            "Which programming languages [are|are not] supported natively in {fnsvc_f}?",
            "Runtimes in {fnsvc_f}: which languages [ship out of the box|are missing out of the box]?",
            "Can you list the languages {fnsvc_f} [runs|won't run] without a custom runtime?",
            "What languages [work|don't work] on {fnsvc_f} with no custom image or runtime layer?",
        ),
    ),
    F(
        "spot_billing_f",
        "cloud",
        (
            "How does {cloudprov_f} bill {mod_spot_f}?",
            "Explain the pricing model behind {mod_spot_f} on {cloudprov_f}.",
            "What determines what I pay for {mod_spot_f} in {cloudprov_f}?",
            "{mod_spot_f} on {cloudprov_f} — how are the charges worked out?",
        ),
    ),
    F(
        "azure_files_f",
        "cloud",
        (
            "How do I {act_mount_f} an Azure file share on a Linux VM?",
            "Commands to {act_mount_f} an Azure Files SMB share on a Linux virtual machine?",
            "On my Linux box in Azure, what's the right way to {act_mount_f} the storage account's file share?",
            "Azure Files plus a Linux VM: walk me through how to {act_mount_f} the share.",
        ),
    ),
    F(
        "backup_keep_f",
        "cloud",
        (
            "How do I set up Azure Backup so VM recovery points are kept {keep_f}?",
            "Configure an Azure Backup policy that retains virtual machine restore points {keep_f} — how?",
            "Azure VM backups: what retention settings hold the recovery points {keep_f}?",
            "I want my Azure VMs' backup copies preserved {keep_f}. Which policy options do I pick?",
        ),
    ),
    F(
        "support_plan_f",
        "cloud",
        (
            "What [do I get|don't I get] with AWS {support_f}?",
            "Which features [are included in|are missing from] the {support_f} plan on AWS?",
            "AWS {support_f}: what [does it cover|does it leave out]?",
            "Break down what Amazon's {support_f} tier [gives you|doesn't give you].",
        ),
    ),
    # ================= databases =================
    F(
        "clustered_idx_f",
        "databases",
        (
            "How many {mod_clustered_f} indexes can one SQL Server table have?",
            "What's the limit on {mod_clustered_f} indexes per table in Microsoft SQL Server?",
            "SQL Server question: max number of {mod_clustered_f} indexes allowed on a single table?",
            "Is there a cap on how many {mod_clustered_f} indexes I can create for one MSSQL table, and what is it?",
        ),
    ),
    F(
        "wh_sql_f",
        "databases",
        (
            "Which standard SQL features [are supported|are not supported] in {warehouse_f}?",
            "What parts of ANSI SQL [can|can't] I use with {warehouse_f}?",
            "{warehouse_f}: which familiar SQL capabilities [does it offer|does it lack]?",
            "List the common SQL features that {warehouse_f} [implements|doesn't implement].",
        ),
    ),
    F(
        "normalize_f",
        "databases",
        (
            "When does it make sense to {act_norm_f} the tables in a reporting database?",
            "Reporting DB design: in what situations should I {act_norm_f} the schema?",
            "What are good reasons to {act_norm_f} a schema used for reports?",
            "Give me the cases where you'd {act_norm_f} tables that feed dashboards and reports.",
        ),
    ),
    F(
        "partition_f",
        "databases",
        (
            "Is it worth partitioning a table that holds {rows_f}?",
            "Table with {rows_f} — do I need partitioning yet?",
            "At {rows_f}, does splitting the table into partitions actually help?",
            "We've got {rows_f} in one table. Partition it or leave it alone?",
        ),
    ),
    F(
        "db_migrate_f",
        "databases",
        (
            "What's the best way to migrate data from {rdbms_f} to {rdbms_f2}?",
            "Moving off {rdbms_f} and onto {rdbms_f2} — which tools and steps do you recommend?",
            "Plan a database migration with {rdbms_f} as the source and {rdbms_f2} as the target.",
            "I'm switching our app's database: currently {rdbms_f}, going to {rdbms_f2}. How should I transfer the data?",
        ),
    ),
    F(
        "azsql_tier_f",
        "databases",
        (
            "Which features [are available|are unavailable] in the Azure SQL Database {azsql_f} tier?",
            "What [can|can't] I do on Azure SQL DB if I pick {azsql_f}?",
            "Azure SQL {azsql_f} service tier: which capabilities [does it include|does it lack]?",
            "Tell me what an Azure SQL database on {azsql_f} [supports|doesn't support].",
        ),
    ),
    F(
        "isolation_f",
        "databases",
        (
            "Which transaction isolation levels [are supported|are unsupported] in {rdbms_f}?",
            "What isolation levels [can|can't] I set for transactions in {rdbms_f}?",
            "List the isolation modes {rdbms_f} [offers|doesn't offer].",
            "{rdbms_f}: which isolation settings for a transaction [are available|aren't available]?",
        ),
    ),
    F(
        "softdel_f",
        "databases",
        (
            "What's the cleanest way to implement {mod_softdel_f} for customer records?",
            "Best pattern for {mod_softdel_f} of customer rows in a relational DB?",
            "How should I design {mod_softdel_f} for customers in our database?",
            "Customers table: how do you do {mod_softdel_f} properly?",
        ),
    ),
    F(
        "join_nomatch_f",
        "databases",
        (
            "What does orders {mod_join_f} customers return for orders that have no matching customer?",
            "Writing orders {mod_join_f} customers: do unmatched orders show up in the result, and with what values?",
            "SQL question — if an order has no customer, what happens to it in orders {mod_join_f} customers?",
            "Explain the output of a {mod_join_f} from orders to customers when an order's customer_id matches nothing.",
        ),
    ),
    F(
        "query_tuning_f",
        "databases",
        (
            "How should {dbaud_f} go about learning SQL query tuning?",
            "Recommend a learning path for {dbaud_f} who want to get good at optimizing slow queries.",
            "Query performance tuning for {dbaud_f}: where to start?",
            "I'm teaching {dbaud_f} to speed up sluggish SQL. What curriculum would you use?",
        ),
    ),
    F(
        "undrop_f",
        "databases",
        (
            "I dropped a Snowflake table and only noticed {undrop_f}. Can I still restore it?",
            "Snowflake table got dropped; is it recoverable {undrop_f}?",
            "Will UNDROP bring back a Snowflake table if I run it {undrop_f}?",
            "Recovering a deleted Snowflake table {undrop_f}: possible or not?",
        ),
    ),
    # ================= webhosting =================
    F(
        "host_move_f",
        "webhosting",
        (
            "How do I move my {cms_f} site from {host_f} to {host_f2} without downtime?",
            "Migrating a {cms_f} blog off {host_f} onto {host_f2}: what steps keep it online?",
            "Switching hosts, leaving {host_f} for {host_f2}. How can I transfer my {cms_f} website with zero downtime?",
            "Zero-downtime transfer of a {cms_f} install where {host_f} is the old host and {host_f2} the new one — walkthrough?",
        ),
    ),
    F(
        "cms_uploads_f",
        "webhosting",
        (
            "Which file types [can|can't] be uploaded to the {cms_f} media library by default?",
            "Out of the box, what kinds of files does {cms_f} [accept|reject] as uploads?",
            "{cms_f} media uploads: which formats [are allowed|are blocked] without extra config?",
            "Tell me which file extensions a stock {cms_f} install [lets you upload|refuses to upload].",
        ),
    ),
    F(
        "le_cert_f",
        "webhosting",
        (
            "How do I get a {mod_cert_f} from Let's Encrypt?",
            "Steps to issue a Let's Encrypt {mod_cert_f} with certbot?",
            "certbot and a {mod_cert_f}: which command and validation method should I use?",
            "I want a free {mod_cert_f} for my site via Let's Encrypt — what's the process?",
        ),
    ),
    F(
        "plan_limits_f",
        "webhosting",
        (
            "What [am I allowed to|am I not allowed to] run on {hostplan_f}?",
            "On {hostplan_f}, which kinds of software [can|can't] I install?",
            "{hostplan_f}: what [is permitted|is off-limits] in terms of apps and server access?",
            "Before I sign up for {hostplan_f}, tell me what it [lets me do|won't let me do].",
        ),
    ),
    F(
        "traffic_host_f",
        "webhosting",
        (
            "What kind of hosting does a site with {traffic_f} need?",
            "My website gets {traffic_f}. Which hosting setup fits?",
            "Hosting recommendation for roughly {traffic_f}?",
            "Expecting {traffic_f}: shared, VPS, or something bigger?",
        ),
    ),
    F(
        "nginx_proxy_f",
        "webhosting",
        (
            "How do I set up Nginx as a {mod_proxy_f}?",
            "Nginx config for running it as a {mod_proxy_f} — got an example?",
            "Turn an nginx server into a {mod_proxy_f}: which directives do I need?",
            "Can you show the steps to make Nginx act as a {mod_proxy_f}?",
        ),
    ),
    F(
        "dns_record_f",
        "webhosting",
        (
            "What does {dnsrec_f} do in DNS?",
            "Explain the purpose of {dnsrec_f} for a domain.",
            "DNS basics: what's {dnsrec_f} for?",
            "When I'm setting up a domain, why would I need {dnsrec_f}?",
        ),
    ),
    F(
        "www_redirect_f",
        "webhosting",
        (
            "How do I redirect {mod_www_f} in .htaccess?",
            "What .htaccess rules send every visitor {mod_www_f}?",
            "Apache rewrite rule to force a 301 {mod_www_f}?",
            "Using an .htaccess file, how can all traffic be permanently redirected {mod_www_f}?",
        ),
    ),
    F(
        "domain_expired_f",
        "webhosting",
        (
            "My .com domain expired {expired_f}. Can I still renew it, and at what cost?",
            "Is it too late to get back a .com that lapsed {expired_f}?",
            "Recovering an expired .com name — it ran out {expired_f}. What are my options?",
            "Domain (.com) expired {expired_f}: renew normally, pay a redemption fee, or is it gone?",
        ),
    ),
    F(
        "site_builder_f",
        "webhosting",
        (
            "Which website builder would you recommend for {siteaud_f}?",
            "Best site builder for {siteaud_f}?",
            "Building a site for {siteaud_f} — Wix, Squarespace, or something else?",
            "What platform should {siteaud_f} use to make their website?",
        ),
    ),
    F(
        "cf_plan_f",
        "webhosting",
        (
            "Which features [do I get|don't I get] on {cfplan_f}?",
            "What [is|isn't] included with the {cfplan_f} plan?",
            "{cfplan_f}: what [does it include|does it leave out]?",
            "Tell me which security and performance features {cfplan_f} [comes with|lacks].",
        ),
    ),
    # ================= cybersecurity =================
    F(
        "rsa_life_f",
        "cybersecurity",
        (
            "How long will a {rsakey_f} RSA key stay secure?",
            "Is a {rsakey_f} RSA key future-proof, and for how many years?",
            "{rsakey_f} RSA: until when is it considered safe to use?",
            "Security lifetime of an RSA key that's {rsakey_f}?",
        ),
    ),
    F(
        "attack_defense_f",
        "cybersecurity",
        (
            "Which defenses [actually stop|don't stop] {attack_f}?",
            "What security controls [are effective|are useless] against {attack_f}?",
            "{attack_f}: which protections [work|fail] in a web app?",
            "Tell me the mitigations that [reliably prevent|won't prevent] {attack_f} on a website.",
        ),
    ),
    F(
        "sym_crypto_f",
        "cybersecurity",
        (
            "When should I use {mod_sym_f} encryption?",
            "What use cases call for {mod_sym_f} cryptography?",
            "{mod_sym_f} encryption — in which situations is it the right choice?",
            "Give me scenarios where {mod_sym_f} ciphers are the way to go.",
        ),
    ),
    F(
        "mfa_bypass_f",
        "cybersecurity",
        (
            "What attacks [can|can't] get around {mfa_f}?",
            "Which attack techniques [are able to defeat|fail against] {mfa_f}?",
            "Relying on {mfa_f} for 2FA: which threats [does that fall to|does that hold up against]?",
            "Tell me which account-takeover methods [succeed|don't succeed] against {mfa_f}.",
        ),
    ),
    F(
        "pentest_box_f",
        "cybersecurity",
        (
            "What happens during a {mod_box_f} penetration test?",
            "Walk me through how a {mod_box_f} pentest is run.",
            "{mod_box_f} pen testing: what does the tester get access to, and what do they do?",
            "We booked a {mod_box_f} pentest engagement; what will the process look like?",
        ),
    ),
    F(
        "awareness_f",
        "cybersecurity",
        (
            "What should security awareness training cover for {secaud_f}?",
            "Designing security awareness training for {secaud_f}: which topics matter most?",
            "Which cyber threats should {secaud_f} be trained to recognize?",
            "Put together a security-awareness syllabus aimed at {secaud_f}.",
        ),
    ),
    F(
        "ransomware_ir_f",
        "cybersecurity",
        (
            "What should our team prioritize {irtime_f} after discovering a ransomware infection?",
            "Ransomware response: {irtime_f} after detection, what are the key tasks?",
            "We found ransomware on our network. What matters most {irtime_f} after we caught it?",
            "Checklist please — ransomware detected, what do responders do {irtime_f} after that?",
        ),
    ),
    F(
        "open_ports_f",
        "cybersecurity",
        (
            "Which ports [should|shouldn't] be exposed to the internet on a {srvrole_f}?",
            "On an internet-facing {srvrole_f}, what ports [need to be open|must stay closed]?",
            "Firewall rules for a public {srvrole_f}: which ports do I [allow|block]?",
            "List the ports a {srvrole_f} on the public internet [ought to|ought not to] listen on.",
        ),
    ),
    F(
        "netpol_f",
        "cybersecurity",
        (
            "How do I write a Kubernetes NetworkPolicy that locks down {mod_ingress_f} traffic for one namespace?",
            "Example NetworkPolicy to restrict {mod_ingress_f} for pods in a single namespace?",
            "k8s: limit {mod_ingress_f} connections in a namespace with a network policy — what's the YAML?",
            "I need to clamp down on {mod_ingress_f} traffic in one Kubernetes namespace. How should the policy look?",
        ),
    ),
    F(
        "audit_scope_f",
        "cybersecurity",
        (
            "What [is|isn't] in scope when we get audited for {framework_f}?",
            "Going through {framework_f} compliance: which systems and processes [are covered|are excluded] by the assessment?",
            "{framework_f} audit scope: what [gets examined|doesn't get examined]?",
            "Tell me what auditors [look at|skip] when they assess us against {framework_f}.",
        ),
    ),
    F(
        "stateful_fw_f",
        "cybersecurity",
        (
            "How does a {mod_state_f} firewall decide whether return traffic gets through?",
            "Explain how reply packets are handled by a {mod_state_f} firewall.",
            "{mod_state_f} packet filtering: what happens to the response packets of an allowed connection?",
            "With a {mod_state_f} firewall, what lets the responses to my outbound HTTPS requests back in?",
        ),
    ),
]


# ==== weather, theater, rideshare, parking (names end with _g) ====================================

_LEXICONS_G: dict[str, Lexicon] = {
    # weather
    "act_baro_g": ("antonym", [("rises", "climbs"), ("falls", "drops")], True),
    "mod_front_g": ("antonym", [("cold front",), ("warm front",)], True),
    "gust_g": (
        "quantity",
        [("30 mph", "thirty mph"), ("50 mph", "fifty mph"), ("70 mph", "seventy mph")],
        False,
    ),
    "outdoors_g": (
        "entity",
        [
            ("hiking above the treeline", "hiking above tree line"),
            ("boating on a lake", "out on a lake in a boat"),
            ("camping in a tent", "tent camping"),
            ("playing golf", "out on the golf course"),
        ],
        False,
    ),
    "fcrange_g": (
        "time",
        [("72 hours", "3 days"), ("a week", "seven days"), ("14 days", "fourteen days")],
        False,
    ),
    "shelter_g": (
        "entity",
        [
            ("a mobile home", "a trailer home"),
            ("a high-rise apartment", "an apartment tower"),
            ("a house with a basement", "a home that has a basement"),
        ],
        False,
    ),
    "hcat_g": (
        "tier",
        [("Category 1", "Cat 1"), ("Category 3", "Cat 3"), ("Category 5", "Cat 5")],
        False,
    ),
    "mod_slope_g": ("antonym", [("windward",), ("leeward", "lee")], True),
    "tscale_g": (
        "entity",
        [("Fahrenheit", "degrees F"), ("Celsius", "centigrade"), ("Kelvin",)],
        False,
    ),
    "dog_g": (
        "entity",
        [
            ("a chihuahua",),
            ("a husky", "a siberian husky"),
            ("a greyhound",),
            ("a labrador", "a lab"),
        ],
        False,
    ),
    "mod_skin_g": ("antonym", [("fair skin", "pale skin"), ("dark skin", "deep brown skin")], True),
    "uv_g": (
        "quantity",
        [("UV 3", "a UV index of 3"), ("UV 7", "a UV index of 7"), ("UV 11", "a UV index of 11")],
        False,
    ),
    # theater
    "mod_showtime_g": ("antonym", [("matinee", "afternoon"), ("evening", "night-time")], True),
    "venue_g": (
        "entity",
        [
            ("the Globe", "Shakespeare's Globe"),
            ("the Sydney Opera House",),
            ("the Royal Albert Hall",),
            ("Radio City Music Hall", "Radio City"),
        ],
        False,
    ),
    "musical_g": (
        "entity",
        [
            ("Hamilton",),
            ("The Book of Mormon", "Book of Mormon"),
            ("The Lion King", "Lion King"),
            ("Les Misérables", "Les Mis"),
        ],
        False,
    ),
    "kidage_g": (
        "audience",
        [
            ("a seven-year-old", "a 7-year-old"),
            ("a 10-year-old",),
            ("a thirteen-year-old", "a 13-year-old"),
        ],
        False,
    ),
    "mod_stagedir_g": ("antonym", [("upstage",), ("downstage",)], True),
    "mod_rows_g": (
        "antonym",
        [("near the front", "close to the stage"), ("at the very back", "in the last rows")],
        True,
    ),
    "party_g": (
        "quantity",
        [
            ("8 people", "a group of 8"),
            ("15 people", "fifteen people"),
            ("40 people", "forty people"),
        ],
        False,
    ),
    "showevent_g": (
        "entity",
        [
            ("a gala premiere", "a gala opening night"),
            ("an outdoor Shakespeare show", "Shakespeare in the park"),
            ("a fringe festival show", "a fringe show"),
        ],
        False,
    ),
    "auditioner_g": (
        "audience",
        [
            ("teenage actors", "teen actors"),
            ("BFA applicants", "BFA program applicants"),
            ("actors in their fifties", "fifty-something actors"),
        ],
        False,
    ),
    "crewrole_g": (
        "entity",
        [
            ("stage manager",),
            ("fly operator", "flyman"),
            ("dresser",),
            ("follow spot operator", "spotlight operator"),
        ],
        False,
    ),
    "medium_g": (
        "entity",
        [
            ("screenplay", "film script"),
            ("stage play", "play script"),
            ("radio drama", "radio play"),
        ],
        False,
    ),
    "seatfor_g": (
        "audience",
        [
            ("tall people", "very tall theatergoers"),
            ("hard-of-hearing patrons", "people who are hard of hearing"),
            ("claustrophobic people", "people with claustrophobia"),
        ],
        False,
    ),
    # rideshare
    "act_stop_g": (
        "antonym",
        [("add a stop", "put in an extra stop"), ("remove a stop", "delete a stop")],
        True,
    ),
    "airport_g": ("entity", [("JFK",), ("LAX",), ("O'Hare", "Chicago O'Hare"), ("SFO",)], False),
    "ubertier_g": ("tier", [("UberX",), ("Uber Black",), ("Uber Comfort",)], False),
    "ridecity_g": ("entity", [("Seattle",), ("Atlanta",), ("Phoenix",), ("Miami",)], False),
    "tod_g": (
        "time",
        [
            ("around 5 a.m.", "at about five in the morning"),
            ("during the evening rush", "in evening rush hour"),
            ("at 2 p.m. on a Tuesday", "on a Tuesday at two in the afternoon"),
        ],
        False,
    ),
    "mod_riderole_g": ("antonym", [("rider", "passenger"), ("driver",)], True),
    "cargo_g": (
        "entity",
        [
            ("a dog", "my dog"),
            ("a surfboard",),
            ("a folding bike", "a foldable bicycle"),
            ("a full-size Christmas tree",),
        ],
        False,
    ),
    "insphase_g": (
        "time",
        [
            (
                "while waiting for a request with the app on",
                "when the app is on but no ride is accepted yet",
            ),
            ("on my way to pick up a rider", "while driving to a pickup"),
            ("with a passenger in the car", "while a rider is on board"),
        ],
        False,
    ),
    "pax_g": (
        "quantity",
        [
            ("three passengers", "3 passengers"),
            ("five passengers", "5 passengers"),
            ("seven passengers", "7 passengers"),
        ],
        False,
    ),
    "taxland_g": (
        "entity",
        [
            ("the United States", "the U.S."),
            ("New Zealand",),
            ("the Netherlands",),
            ("South Africa",),
        ],
        False,
    ),
    "act_addr_g": ("antonym", [("save", "store"), ("erase", "wipe")], True),
    # parking
    "mod_curb_g": ("antonym", [("left", "left-hand"), ("right", "right-hand")], True),
    "mod_hill_g": (
        "antonym",
        [
            ("facing up a hill", "pointed up a slope"),
            ("facing down a hill", "pointed down a slope"),
        ],
        True,
    ),
    "vheight_g": (
        "quantity",
        [
            ("6 ft 6 in", "six foot six"),
            ("7 ft 2 in", "seven foot two"),
            ("8 ft 4 in", "eight foot four"),
        ],
        False,
    ),
    "metercity_g": (
        "entity",
        [("San Francisco", "SF"), ("Washington, D.C.", "DC"), ("Philadelphia", "Philly")],
        False,
    ),
    "evstate_g": ("entity", [("California",), ("Colorado",), ("New Jersey",), ("Utah",)], False),
    "denlot_g": (
        "tier",
        [
            ("economy lot",),
            ("terminal garage", "garage at the terminal"),
            ("Pikes Peak shuttle lot", "Pikes Peak lot"),
        ],
        False,
    ),
    "act_placard_g": ("antonym", [("apply for", "request"), ("surrender", "turn in")], True),
    "act_ticket_g": ("antonym", [("pay", "pay off"), ("contest", "dispute", "fight")], True),
    "snowcity_g": ("entity", [("Minneapolis",), ("Buffalo",), ("Milwaukee",)], False),
    "commute_g": (
        "quantity",
        [("two days", "2 days"), ("3 days",), ("five days", "5 days")],
        False,
    ),
    "permitwho_g": (
        "audience",
        [
            ("tenants", "renters"),
            ("houseguests", "overnight visitors"),
            ("home care workers", "visiting caregivers"),
        ],
        False,
    ),
}

_FAMILIES_G = [
    # ---------------------------------------------------------------- weather
    F(
        "baro_trend_g",
        "weather",
        (
            "What does it mean for tomorrow's weather when the barometric pressure {act_baro_g} fast?",
            "My home barometer {act_baro_g} sharply over a few hours. Which forecast does that point to?",
            "Reading a barometer: if it {act_baro_g} quickly, what conditions should I expect next?",
            "Air pressure {act_baro_g} steeply this afternoon — so what's likely coming?",
            "Pressure trend question: rapid change where the reading {act_baro_g}, what weather follows?",
        ),
    ),
    F(
        "front_pass_g",
        "weather",
        (
            "What kind of weather comes with a {mod_front_g} passing through?",
            "When a {mod_front_g} sweeps over my area, how do sky, temperature and wind usually change?",
            "{mod_front_g} moving in: describe the conditions it typically brings.",
            "Saw a {mod_front_g} heading our way on the forecast map. What should I expect outside?",
        ),
    ),
    F(
        "gust_truck_g",
        "weather",
        (
            "Is it safe to drive a box truck on the highway with {gust_g} wind gusts?",
            "Gusts hitting {gust_g} today — should I take my high-sided moving van out on the freeway?",
            "Can a tall rental truck handle interstate driving when the wind is gusting to {gust_g}?",
            "High-profile vehicle plus {gust_g} gusts: go, or stay parked?",
        ),
    ),
    F(
        "lightning_spot_g",
        "weather",
        (
            "Caught in a thunderstorm while {outdoors_g}: which spots [are|aren't] safe from lightning?",
            "Where [should|shouldn't] I shelter if a storm rolls in while I'm {outdoors_g}?",
            "If thunder starts while {outdoors_g}, what places [give|don't give] protection from strikes?",
            "Lightning safety when {outdoors_g} — list the places that [are safe|are dangerous] to wait it out.",
        ),
    ),
    F(
        "forecast_range_g",
        "weather",
        (
            "How accurate is a weather forecast for {fcrange_g} ahead?",
            "Can I trust the forecast {fcrange_g} out, or is it mostly guesswork?",
            "Forecast reliability {fcrange_g} in advance — how good is it really?",
            "Planning an outdoor wedding: how much weight should a prediction made {fcrange_g} before the day get?",
        ),
    ),
    F(
        "tornado_shelter_g",
        "weather",
        (
            "When a tornado hits, which spots in {shelter_g} [are|are not] safe places to shelter?",
            "Tornado warning and I'm in {shelter_g}: where [should|shouldn't] I take cover?",
            "Which parts of {shelter_g} [offer|don't offer] real protection from a tornado?",
            "Sheltering from a twister in {shelter_g} — which places [are safe|are dangerous]?",
        ),
    ),
    F(
        "hurricane_damage_g",
        "weather",
        (
            "How much damage can a {hcat_g} hurricane do to a wood-frame house?",
            "What happens to a typical timber-framed home when a {hcat_g} hurricane makes landfall?",
            "{hcat_g} hurricane hitting a frame house: what damage should the owner expect?",
            "Expected structural harm to a wooden home from a {hcat_g} hurricane?",
        ),
    ),
    F(
        "rain_shadow_g",
        "weather",
        (
            "What's rainfall usually like on the {mod_slope_g} side of a mountain range, and why?",
            "Why do towns on the {mod_slope_g} slopes of mountains get the precipitation they do?",
            "Mountain weather: explain how much rain the {mod_slope_g} side tends to receive.",
            "Is the {mod_slope_g} face of a range wet or dry, and what causes it?",
        ),
    ),
    F(
        "temp_convert_g",
        "weather",
        (
            "How do I convert a temperature from {tscale_g} to {tscale_g2}?",
            "What's the formula to turn {tscale_g} readings into {tscale_g2}?",
            "The forecast is in {tscale_g} but I think in {tscale_g2} — how do I do the math?",
            "{tscale_g} to {tscale_g2} conversion: walk me through it.",
        ),
    ),
    F(
        "cold_dog_walk_g",
        "weather",
        (
            "How cold does it have to get before it's too cold to walk {dog_g}?",
            "What's the lowest temperature at which I can safely take {dog_g} out for a walk?",
            "Winter walks with {dog_g}: at what point is the weather too frigid?",
            "Below what temperature should {dog_g} stay indoors instead of going for a stroll?",
        ),
    ),
    F(
        "uv_burn_g",
        "weather",
        (
            "How many minutes does it take {mod_skin_g} to burn at {uv_g}?",
            "Forecast says {uv_g} today. I have {mod_skin_g} — how long can I stay out before I burn?",
            "Time to sunburn for {mod_skin_g} under {uv_g}?",
            "If the sun is at {uv_g}, roughly how long until someone with {mod_skin_g} gets burned?",
        ),
    ),
    # ---------------------------------------------------------------- theater
    F(
        "curtain_time_g",
        "theater",
        (
            "What time do Broadway {mod_showtime_g} performances usually begin?",
            "Typical curtain time for a Broadway {mod_showtime_g} show?",
            "If I book the {mod_showtime_g} performance of a Broadway show, when does the curtain usually go up?",
            "When do {mod_showtime_g} shows on Broadway tend to start?",
            "Broadway, {mod_showtime_g} performance: usual start time?",
        ),
    ),
    F(
        "venue_bag_g",
        "theater",
        (
            "What items [am I allowed|am I not allowed] to bring into {venue_g}?",
            "{venue_g} bag policy: which things [can|can't] go in with me?",
            "Before my show at {venue_g}, tell me what I [can|cannot] carry inside.",
            "Which belongings [are permitted|are banned] at {venue_g}?",
        ),
    ),
    F(
        "kid_musical_g",
        "theater",
        (
            "Is {musical_g} suitable for {kidage_g}?",
            "Thinking of taking {kidage_g} to see {musical_g} — is the content OK?",
            "{musical_g} with {kidage_g}: too mature, or fine?",
            "Would {musical_g} be age-appropriate for {kidage_g}, content-wise?",
            "Would you bring {kidage_g} to {musical_g}?",
        ),
    ),
    F(
        "stage_direction_g",
        "theater",
        (
            "If I'm an actor facing the audience, which direction is {mod_stagedir_g}?",
            "New to acting: when the director says move {mod_stagedir_g}, where do I go?",
            "Stage directions — does {mod_stagedir_g} mean toward the house or away from it?",
            "Where exactly is {mod_stagedir_g} on a proscenium stage?",
            "Explain {mod_stagedir_g} to a first-time community theater performer.",
        ),
    ),
    F(
        "seat_rows_g",
        "theater",
        (
            "What are the pros and cons of sitting {mod_rows_g} at a musical?",
            "Is a seat {mod_rows_g} worth it for a big musical, or are there downsides?",
            "Musical tickets: what do I gain and lose by choosing seats {mod_rows_g}?",
            "Trying to decide on seats {mod_rows_g} for a musical — upsides and drawbacks?",
        ),
    ),
    F(
        "group_sales_g",
        "theater",
        (
            "Can a party of {party_g} get group rates for a Broadway show?",
            "We're {party_g} wanting to see a Broadway musical together. Is there a group discount?",
            "Booking Broadway seats for {party_g}: do we qualify for group pricing?",
            "Group ticket deal on Broadway for {party_g} — possible?",
        ),
    ),
    F(
        "show_dress_g",
        "theater",
        (
            "What [should|shouldn't] I wear to {showevent_g}?",
            "Dress code for {showevent_g} — what's [appropriate|a faux pas]?",
            "Going to {showevent_g} this week. Which outfits [fit|would be wrong for] it?",
            "Help me pick clothes for {showevent_g}: what [works|doesn't work]?",
        ),
    ),
    F(
        "monologue_pick_g",
        "theater",
        (
            "Which monologues [are good picks|should be avoided] for {auditioner_g}?",
            "Suggest audition monologues that [suit|don't suit] {auditioner_g}.",
            "For {auditioner_g}, what audition speeches [make sense|are a mistake]?",
            "Monologue ideas for {auditioner_g} — which ones [to use|to skip]?",
        ),
    ),
    F(
        "crew_role_g",
        "theater",
        (
            "What does a {crewrole_g} do during a live show?",
            "During a performance, what are the {crewrole_g}'s responsibilities?",
            "Backstage jobs: explain the {crewrole_g}'s duties while the show is running.",
            "What is a theater {crewrole_g} actually responsible for once the curtain is up?",
        ),
    ),
    F(
        "adapt_script_g",
        "theater",
        (
            "How do I adapt a {medium_g} into a {medium_g2}?",
            "Tips for turning my {medium_g} into a {medium_g2}?",
            "Converting a {medium_g} to a {medium_g2}: what has to change?",
            "I wrote a {medium_g} and want to rework it as a {medium_g2}. How should I go about it?",
        ),
    ),
    F(
        "seat_needs_g",
        "theater",
        (
            "Which theater seats [are|aren't] a good fit for {seatfor_g}?",
            "Where in an auditorium [should|shouldn't] {seatfor_g} sit?",
            "Seat picking for {seatfor_g} — which spots [to go for|to avoid]?",
            "Tell me which seats in a playhouse [work well|are a poor choice] for {seatfor_g}.",
        ),
    ),
    # ---------------------------------------------------------------- rideshare
    F(
        "ride_stop_g",
        "rideshare",
        (
            "How do I {act_stop_g} once my Uber trip is already underway?",
            "Mid-ride on Uber: can I {act_stop_g}, and how?",
            "Steps to {act_stop_g} on an Uber ride that's in progress?",
            "Is there a way to {act_stop_g} during an active Uber trip?",
        ),
    ),
    F(
        "airport_pickup_g",
        "rideshare",
        (
            "Where's the rideshare pickup spot at {airport_g}?",
            "Just landed at {airport_g} — where do I go to meet my Uber or Lyft driver?",
            "{airport_g} arrivals: where exactly do app-ride passengers get collected?",
            "At {airport_g}, which area do I walk to for an Uber/Lyft pickup?",
        ),
    ),
    F(
        "cancel_fee_g",
        "rideshare",
        (
            "In which situations [do|don't] I get charged a cancellation fee on {ubertier_g}?",
            "Cancelling an {ubertier_g} ride — when [is|isn't] there a fee?",
            "Tell me when calling off {ubertier_g} [costs|doesn't cost] me money.",
            "{ubertier_g} cancellation policy: which cases [trigger|avoid] a charge?",
        ),
    ),
    F(
        "driver_car_rules_g",
        "rideshare",
        (
            "What vehicle requirements do I need to meet to drive for Uber in {ridecity_g}?",
            "Want to start driving Uber in {ridecity_g}. What does my car need to qualify?",
            "{ridecity_g} Uber drivers: which rules does the car itself have to pass?",
            "Car eligibility for becoming an Uber driver in {ridecity_g}?",
        ),
    ),
    F(
        "jfk_fare_g",
        "rideshare",
        (
            "Roughly what does an Uber from Midtown Manhattan to JFK cost {tod_g}?",
            "Heading out to Kennedy Airport from midtown {tod_g} — ballpark fare if I book it on the Uber app?",
            "Typical Uber price {tod_g} for a Midtown-to-Kennedy-airport trip?",
            "Going from Midtown to JFK {tod_g}; what's a typical Uber fare?",
        ),
    ),
    F(
        "rating_move_g",
        "rideshare",
        (
            "What behaviors [boost|hurt] a {mod_riderole_g}'s star rating on Uber?",
            "How can a {mod_riderole_g} [improve|ruin] their Uber rating?",
            "As an Uber {mod_riderole_g}, what [gets my rating up|brings my rating down]?",
            "Uber stars for the {mod_riderole_g}: which habits [raise|sink] the score?",
        ),
    ),
    F(
        "ride_cargo_g",
        "rideshare",
        (
            "Am I allowed to bring {cargo_g} along in an Uber?",
            "Can I ride in an Uber with {cargo_g}?",
            "Uber's policy on bringing {cargo_g}: will the driver let it in the car?",
            "Taking {cargo_g} in a rideshare car — is that OK on Uber?",
        ),
    ),
    F(
        "driver_insurance_g",
        "rideshare",
        (
            "What insurance covers me as an Uber driver {insphase_g}?",
            "Uber driving: if I crash {insphase_g}, whose policy pays?",
            "For an Uber driver, which coverage applies {insphase_g}?",
            "I drive for Uber. Am I protected by Uber's insurance or my own {insphase_g}?",
        ),
    ),
    F(
        "group_ride_g",
        "rideshare",
        (
            "Which Uber ride type should I book for {pax_g} plus suitcases?",
            "We're {pax_g} with luggage heading to the airport — what Uber option fits us?",
            "Uber category for {pax_g} and bags?",
            "What's the right Uber vehicle class when there are {pax_g} carrying luggage?",
        ),
    ),
    F(
        "driver_tax_g",
        "rideshare",
        (
            "Which expenses [can|can't] a rideshare driver write off on taxes in {taxland_g}?",
            "Driving for Uber in {taxland_g}: what costs [are|aren't] tax-deductible?",
            "Tax time in {taxland_g} — list the Uber driving expenses I [may|may not] deduct.",
            "What [qualifies|doesn't qualify] as a deductible expense for ride-hail drivers in {taxland_g}?",
        ),
    ),
    F(
        "home_address_g",
        "rideshare",
        (
            "How do I {act_addr_g} my home address in the Uber app?",
            "Where in Uber's settings can I {act_addr_g} the Home location?",
            "Walk me through how to {act_addr_g} the home address on my Uber profile.",
            "Steps to {act_addr_g} 'Home' as a place in Uber?",
        ),
    ),
    # ---------------------------------------------------------------- parking
    F(
        "parallel_side_g",
        "parking",
        (
            "How do I parallel park on the {mod_curb_g} side of a one-way street?",
            "One-way road, free space along the {mod_curb_g} curb — what's the technique for slotting in?",
            "Talk me through reversing into a gap on the {mod_curb_g} side when traffic only runs in one direction.",
            "Parallel parking against the {mod_curb_g} curb on a one-way street — how is it done?",
        ),
    ),
    F(
        "hill_wheels_g",
        "parking",
        (
            "Which way should I turn my front wheels when parking {mod_hill_g} [with|without] a curb?",
            "Parked {mod_hill_g} [next to a curb|on a road with no curb] — should my tires point toward the edge or away?",
            "Curb rule: when I leave my car {mod_hill_g} [beside a curb|where there's no curb], which direction do the wheels go?",
            "Wheel angle for a car parked {mod_hill_g}, [curb present|no curb]?",
            "Driving test prep: stopping {mod_hill_g} [against a kerb|without any kerb], how do I angle the tyres?",
        ),
    ),
    F(
        "garage_clearance_g",
        "parking",
        (
            "Will a van that's {vheight_g} tall clear a typical parking garage entrance?",
            "My van stands {vheight_g} high. Can I use standard multi-storey car parks?",
            "Parking garage clearance: is a vehicle height of {vheight_g} going to be OK?",
            "Can a van with a roof height of {vheight_g} drive into an ordinary parking structure without scraping?",
        ),
    ),
    F(
        "meter_hours_g",
        "parking",
        (
            "When [do|don't] I need to pay street parking meters in {metercity_g}?",
            "{metercity_g} meters: which hours and days [require|don't require] payment?",
            "Tell me the times parking meters in {metercity_g} [are enforced|are free].",
            "In {metercity_g}, at what times [do I have to|don't I have to] feed the meter?",
        ),
    ),
    F(
        "ev_bay_g",
        "parking",
        (
            "Is it legal in {evstate_g} to park in an EV charging spot when my car [is|isn't] charging?",
            "{evstate_g} law: am I allowed to occupy an electric-vehicle charging bay [while actively charging|without charging]?",
            "Can I leave my EV in a charger space in {evstate_g} [during a charging session|if it isn't plugged in and charging]?",
            "Parking at an EV charger in {evstate_g} [as I charge|without drawing power] — is that permitted?",
        ),
    ),
    F(
        "den_lot_g",
        "parking",
        (
            "What's the daily rate for the {denlot_g} at Denver International Airport?",
            "Flying out of DEN next week: how much per day does the {denlot_g} cost?",
            "DEN airport {denlot_g} — price for 24 hours?",
            "How much will I pay per day to leave my car in the {denlot_g} at Denver's airport?",
        ),
    ),
    F(
        "placard_g",
        "parking",
        (
            "How do I {act_placard_g} a disabled parking placard in California?",
            "Steps to {act_placard_g} a California disability placard through the DMV?",
            "What paperwork does the CA DMV want when you {act_placard_g} a handicap hang tag?",
            "Need to {act_placard_g} a blue hang tag for my mom here in California — what's involved?",
        ),
    ),
    F(
        "nyc_ticket_g",
        "parking",
        (
            "How do I {act_ticket_g} a parking ticket I got in NYC?",
            "Found a summons on my windshield in New York City. What's the process to {act_ticket_g} it?",
            "NYC parking violation — best way to {act_ticket_g} it?",
            "Walk me through how to {act_ticket_g} a New York City parking summons.",
        ),
    ),
    F(
        "snow_emergency_g",
        "parking",
        (
            "When {snowcity_g} declares a snow emergency, which streets [can I still park on|am I banned from parking on]?",
            "{snowcity_g} just called a snow emergency. Where [is it OK|is it not OK] to leave a car at the curb?",
            "{snowcity_g} snow emergency rules — which roads [stay open|are off-limits] for parked cars?",
            "Where [can I|can't I] leave my car on the street during a {snowcity_g} snow emergency?",
        ),
    ),
    F(
        "monthly_pass_g",
        "parking",
        (
            "Is a monthly parking pass worth it if I commute in {commute_g} a week?",
            "I drive to the office {commute_g} per week. Monthly garage permit or pay daily?",
            "Monthly vs daily parking for someone going in {commute_g} weekly — which is cheaper?",
            "Commuting {commute_g} a week: should I buy a monthly spot or just pay each day?",
        ),
    ),
    F(
        "resident_permit_g",
        "parking",
        (
            "How do {permitwho_g} get a residential parking permit in a city permit zone?",
            "Our block is sticker-only. What are the steps for {permitwho_g} to be issued one?",
            "What do {permitwho_g} need to show to obtain a neighborhood parking permit?",
            "{permitwho_g} in a permit-only neighborhood: how do they secure a pass for street parking?",
        ),
    ),
]


LEXICONS: dict[str, Lexicon] = {**_LEXICONS_D, **_LEXICONS_E, **_LEXICONS_F, **_LEXICONS_G}
FAMILIES: list[F] = _FAMILIES_D + _FAMILIES_E + _FAMILIES_F + _FAMILIES_G
