"""Phrasing banks of the offline template generator (our own wording; Shopping Companion §4 steps 2–3).

Preferences are revealed indirectly: the user talks about habits, past purchases, comfort, returns
or what friends say, never "I want a product with attribute X". Every bank holds several phrasings,
statements can be scoped to a product ("{item}"), the assistant sometimes asks before the user
answers, and small talk surrounds the statements, so a needle cannot be found by matching one fixed
sentence. Placeholders: ``{v}`` the attribute value as spoken, ``{label}`` the attribute's spoken
name, ``{item}`` a plural way to refer to the product type, ``{s}`` a whole statement.

These banks say values verbatim; the template generator uses them for values the paraphrase
lexicon (``benchmark/data/paraphrases.yaml``) has no statement for (brands, sizes, rare values) and
otherwise says values indirectly from the lexicon. :data:`SITUATION_OPENERS` start needles far from
shopping; :data:`DISTRACTORS` are topic sessions on the product type that state no preference.
"""

from __future__ import annotations

# --------------------------------------------------------------------------- preference statements

#: Canonical attribute label -> statements revealing the value ``{v}`` (first person, indirect).
PREFERENCE_BANK: dict[str, list[str]] = {
    "colour": [
        "Funny thing, I noticed nearly everything I grab in the morning is {v}. It just feels like me.",
        "My sister teases me because I come home with something {v} every single time.",
        "When I have a choice I go for {v}; other shades never look right on me.",
        "I keep trying to branch out but honestly {v} is what I end up with.",
        "People at work say they can spot me from across the room because of all the {v}.",
        "I did one of those colour analysis sessions and the verdict was {v}. I've stuck with it since.",
        "Whenever a shop has a {v} version, that's the one that comes home with me.",
        "{v} has been my colour for years, I don't really see that changing.",
    ],
    "fabric": [
        "My skin gets irritated by a lot of materials. {v} is the one I can wear all day without thinking about it.",
        "Everything that isn't {v} ends up at the back of my wardrobe, I just don't feel comfortable in it.",
        "After a few bad experiences I check the label now, and {v} is what I look for.",
        "I run warm, so {v} is pretty much the only thing that works for me.",
        "The {v} pieces are the ones that survive every wash in my house, so that's what I stick to.",
        "Honestly, {v} against my skin is the best feeling, I don't bother with anything else.",
    ],
    "material": [
        "I've had the best luck with {v}; it's held up better than anything else I've owned.",
        "For me it has to be {v}, the other stuff falls apart after a season.",
        "I trust {v}. Learned that the hard way after a cheap one gave up on me.",
        "My rule these days is simple: {v} or I don't buy it.",
        "Everything I own that's lasted more than a couple of years turns out to be {v}.",
    ],
    "pattern": [
        "I'm a {v} person through and through.",
        "Looking at my closet, it's almost all {v}. I guess that's my taste.",
        "Busy designs give me a headache; {v} is what I keep coming back to.",
        "My friends say I have a uniform, and they mean {v}.",
        "I tried to be adventurous once and returned it the next day. {v} suits me better.",
    ],
    "print": [
        "I have a soft spot for {v} prints, they always cheer me up.",
        "If there's a {v} option I'll pick it, that's just my style.",
        "Something with a {v} print always catches my eye first.",
        "My favourite pieces all have a {v} look, now that I think about it.",
    ],
    "fit": [
        "I've figured out that {v} suits my build best; anything else just hangs wrong.",
        "The tailor told me years ago to stick to {v} and I never looked back.",
        "Whenever I order something that isn't {v} I end up returning it.",
        "{v} is the only cut I feel confident in, honestly.",
        "My body and {v} get along, other cuts not so much.",
    ],
    "neck": [
        "Strange detail, but I always end up with a {v}. Other necklines feel off on me.",
        "I feel most comfortable in a {v}, the rest somehow never sit right.",
        "My partner says the {v} is my signature look, and they're probably right.",
        "Anything around my throat bugs me unless it's a {v}.",
    ],
    "collar": [
        "I only feel put together with a {v}.",
        "A {v} is the detail I look for first, weirdly.",
        "I've got a thing for the {v}, it frames my face well.",
    ],
    "sleeve length": [
        "I'm much happier in {v}, honestly, whatever the weather.",
        "Call it a habit, but I reach for {v} nine times out of ten.",
        "I find {v} the most practical for how I live.",
        "My arms are always either too hot or too cold, and {v} is the compromise that works for me.",
    ],
    "sleeve styling": [
        "I always end up choosing {v}, they're the most comfortable for me.",
        "{v} are my weakness, I can't resist them.",
    ],
    "length": [
        "{v} is the length I feel best in, I rarely buy anything else.",
        "I've noticed I keep picking {v} styles, they just suit me.",
        "Anything other than {v} feels wrong on me, I don't know why.",
    ],
    "usage": [
        "Most of what I buy needs to work for {v} wear, that's my everyday life.",
        "My life is pretty much {v} these days, so that's what I shop for.",
        "I don't have much use for anything that isn't meant for {v} wear.",
    ],
    "occasion": [
        "I mostly dress for {v} occasions, so I buy with that in mind.",
        "Ninety percent of my week is {v}, my shopping reflects that.",
        "I only really need things that work for {v} settings.",
    ],
    "brand": [
        "I've been loyal to {v} for ages. They just get it right for me.",
        "Every time I stray from {v} I regret it.",
        "My last three purchases in a row were from {v}, and I was happy with all of them.",
        "I have a soft spot for {v}; their stuff fits me like nothing else does.",
        "Honestly, if it says {v} on it, I'm already halfway sold.",
    ],
    "size": [
        "I'm a size {v}, pretty consistently across brands.",
        "Size {v} is what fits me, I checked again last month.",
        "Anything bigger or smaller than size {v} and I end up exchanging it.",
        "I always buy size {v}, that hasn't changed in years.",
    ],
    "fastening": [
        "I can't be bothered with anything fiddly, {v} is what I always pick.",
        "My patience in the morning only stretches to {v}, to be honest.",
        "{v} is a must for me, I'm always in a hurry.",
    ],
    "closure": [
        "I'm impatient in the mornings so a {v} closure is a must for me.",
        "I always look for a {v} closure, the others drive me mad.",
        "Give me a {v} closure and I'm happy.",
    ],
    "display": [
        "I'm firmly in the {v} camp when it comes to watch faces.",
        "I've only ever worn {v} watches and I don't see that changing.",
        "Reading the time on anything but an {v} face feels odd to me.",
    ],
    "waist rise": [
        "{v} is the only cut that's actually comfortable for me when I sit all day.",
        "After years of trial and error, {v} is what works for my body.",
        "I always check that it's {v} before I even try it on.",
    ],
    "ankle height": [
        "I like my shoes {v}, it gives my ankles the right amount of support.",
        "Somehow I always end up buying {v} pairs.",
        "{v} is my thing, my physio actually recommended it.",
    ],
    "sport": [
        "These days most of my free time goes into {v}, so I buy with that in mind.",
        "I've been really into {v} lately, three times a week at least.",
        "{v} is my big hobby now, I'm out doing it every weekend.",
        "I signed up for a {v} club in spring and haven't stopped since.",
    ],
    "toe shape": [
        "My feet only tolerate a {v}, I learned that the painful way.",
        "I always go for a {v}, they're the kindest to my toes.",
    ],
    "heel type": [
        "If there's a heel, it has to be a {v} heel, I can actually walk in those.",
        "{v} heels are the only ones I can wear for a whole evening.",
    ],
    "movement": [
        "I'm a bit of a nerd about it: {v} movement or nothing.",
        "I've always preferred {v} movement, I like knowing how it works.",
    ],
    "strap material": [
        "Straps made of {v} are the only ones that don't bother my wrist.",
        "I always go for a {v} strap, it feels right on me.",
    ],
    "dial shape": ["A {v} dial just looks right on my wrist.", "I've always been drawn to {v} dials."],
    "finish": ["I'm all about a {v} finish, it suits my skin.", "A {v} finish is what I reach for every morning."],
    "formulation": [
        "I get on best with the {v} kind, the others are a mess on me.",
        "{v} is the only format I actually finish before it expires.",
    ],
    "skin type": [
        "My skin is {v}, so I have to be careful what I put on it.",
        "Being on the {v} side, I've learned to buy accordingly.",
    ],
    "fragrance": [
        "I'm drawn to {v} scents, always have been.",
        "Anything {v} and I'm happy, the rest gives me a headache.",
    ],
    "scent": ["I'm drawn to {v} scents, always have been.", "The {v} scent is the one I keep coming back to."],
    "wash care": [
        "If it can't handle {v}, it's not coming home with me. I have no time for fuss.",
        "My laundry routine is {v} and that's it, so I buy accordingly.",
    ],
    "sole material": [
        "{v} soles are the only ones that grip properly where I walk.",
        "I always check for a {v} sole, it makes such a difference.",
    ],
    "water resistance": [
        "I'm near water a lot, so {v} is something I look for.",
        "After ruining one in the rain, {v} is a must for me.",
    ],
    "lens colour": [
        "I find {v} lenses the easiest on my eyes.",
        "I always go for {v} lenses, everything looks better through them.",
    ],
    "frame material": [
        "{v} frames are the only ones that survive me.",
        "I've always gone for {v} frames, they feel right on my face.",
    ],
    "style": [
        "My taste is pretty {v}, I don't stray far from it.",
        "People tell me my style is very {v}, and I take that as a compliment.",
    ],
    "item form": [
        "I get on best with the {v} form, the others never work for me.",
        "I always buy the {v} version, it's the easiest to use.",
    ],
    "transparency": ["I always check that it's {v}, I'm picky about that.", "{v} fabric is what I'm comfortable in."],
    "weave type": [
        "I've noticed I prefer {v} pieces, they sit better on me.",
        "{v} is what I tend to buy, it just feels nicer.",
    ],
    "features": [
        "I always look for {v}, it's the feature I actually use.",
        "{v} is my one must-have, the rest I can be flexible on.",
    ],
}

#: Statements for attributes without a dedicated bank (Amazon ``details`` keys and the like).
GENERIC_BANK: list[str] = [
    "When it comes to {label}, {v} has always worked best for me.",
    "I've learned the hard way that for {label} I need {v}.",
    "Small thing, but {label} matters to me: {v}, every time.",
    "I'm pretty set on {v} as far as {label} goes.",
    "My go-to for {label} is {v}, I don't experiment much there.",
    "If I had to name one thing I'm picky about, it's {label}, and the answer is {v}.",
    "Last time I ignored the {label} and regretted it; {v} is what suits me.",
    "I always double-check the {label}. {v} or I keep looking.",
    "For {label} I'm a creature of habit: {v}.",
    "Friends ask why I'm so fussy about {label}, but {v} just works for me.",
]

#: How a statement is tied to one product of the request ({item}: plural reference, {s}: statement).
SCOPE_TEMPLATES: list[str] = [
    "About {item}: {s}",
    "{s} At least that's how it is with {item}.",
    "With {item} in particular, here's the thing. {s}",
    "{s} I'm talking about {item} here, not everything.",
    "Now that you mention {item}... {s}",
    "For {item}, I'd say this: {s}",
    "{s} That's mostly about {item}, to be clear.",
]

#: Two statements in one user turn.
CONNECTORS: list[str] = ["{a} Also, {b}", "{a} And another thing: {b}", "{a} Oh, and {b}", "{a} Plus, {b}"]

#: Assistant questions that invite the next statement (named attribute / open).
ASK_BANK: dict[str, list[str]] = {
    "colour": ["Do you have colours you always come back to?", "Is there a shade you feel best in?"],
    "fabric": ["How do you feel about fabrics? Anything that works especially well?"],
    "material": ["Are you particular about materials?"],
    "fit": ["What kind of cut usually works for you?"],
    "brand": ["Any labels you trust more than others?"],
    "size": ["Do sizes ever give you trouble when ordering online?"],
    "pattern": ["Plain or patterned, what's more you?"],
}
ASK_GENERIC: list[str] = [
    "What else have you noticed about what works for you?",
    "Anything else you've learned about your own taste?",
    "Is there something you always check before buying?",
    "What's your usual approach, then?",
    "Interesting! Any other habits like that?",
]

#: Assistant acknowledgements (never repeat a value).
ASSISTANT_ACKS: list[str] = [
    "That's really useful to know about yourself.",
    "Makes sense. Sticking to what you're comfortable with saves a lot of returns.",
    "Good to know! It sounds like you have a clear sense of what works for you.",
    "That's a helpful rule of thumb when shopping.",
    "I'll keep that in mind if you ask me for suggestions later.",
    "Plenty of people feel the same way, it's a sensible preference.",
    "Knowing that about yourself is half the battle.",
    "Noted. It's funny how these little habits form.",
    "That sounds like experience talking!",
    "Fair enough, comfort and confidence matter most.",
    "I can see why, it clearly works for you.",
    "That's a good instinct to trust.",
]

#: "Does not matter" remarks about a label ({label}, optionally scoped).
DONT_CARE_BANK: list[str] = [
    "Honestly, I'm not picky about the {label}.",
    "The {label} doesn't really matter to me, I've never paid attention to it.",
    "I couldn't care less about the {label}, to be honest.",
    "{label}? Whatever, I'm flexible there.",
]

# --------------------------------------------------------------------------- needle scaffolding

#: Domain -> (user opener, assistant reply) pairs. Domains: see ``domain_of``.
OPENERS: dict[str, list[tuple[str, str]]] = {
    "clothing": [
        (
            "I'm finally clearing out my wardrobe this weekend, it's a mess.",
            "That sounds like a good project! Sorting into keep, donate and repair piles usually helps.",
        ),
        (
            "I've got a big trip coming up and I'm trying to figure out what to pack.",
            "Exciting! Packing around a few versatile pieces makes things much easier.",
        ),
        (
            "I've been reading about building a capsule wardrobe.",
            "Capsule wardrobes are great: fewer pieces that all go together.",
        ),
        (
            "Work is starting a new dress policy next month, so I'm rethinking what I wear.",
            "Changes like that are a good moment to see what really works for you.",
        ),
        (
            "My cousin's wedding is in a few months and it got me thinking about my clothes in general.",
            "Events like that are a nice excuse to take stock.",
        ),
    ],
    "footwear": [
        (
            "My feet have been killing me after long days lately.",
            "Sorry to hear that! Footwear makes a huge difference for that.",
        ),
        (
            "I counted my shoes yesterday and I'm a little embarrassed.",
            "Ha, you're not alone. Most people have a few pairs they never wear.",
        ),
        (
            "I started walking to work instead of taking the bus.",
            "That's a great habit! Comfortable shoes will be your best friend.",
        ),
    ],
    "accessories": [
        (
            "I lost my favourite everyday things on the train last month and I'm still annoyed.",
            "That's so frustrating. Replacing things you liked is never quite the same.",
        ),
        (
            "A friend asked me why I always carry the same stuff, and it made me think.",
            "Habits like that often say a lot about what works for us.",
        ),
        (
            "I'm trying to be more deliberate about the little things I use every day.",
            "That's a nice goal, those small items get used more than anything else.",
        ),
    ],
    "beauty": [
        (
            "My bathroom shelf is overflowing and I barely use half of it.",
            "That's very common! It helps to notice which products you actually finish.",
        ),
        ("I've been trying to simplify my morning routine.", "A simpler routine is easier to stick to."),
        ("The dry winter air has been rough on me lately.", "It really can be. Small changes in a routine often help."),
        (
            "A friend gave me a bunch of samples and it made me realise how picky I am.",
            "Samples are a great way to learn what you actually like.",
        ),
    ],
    "home": [
        (
            "We're slowly redoing the flat and I keep changing my mind.",
            "Redecorating is fun but the choices can be overwhelming.",
        ),
        (
            "I spent the whole Sunday reorganising the kitchen.",
            "That's satisfying work! Did you find a system you like?",
        ),
        (
            "We're hosting my in-laws next month and I'm looking at the house with new eyes.",
            "Visitors have a way of making you notice everything!",
        ),
        ("I finally unpacked the last moving boxes.", "Congratulations! That last box is always the hardest."),
    ],
    "electronics": [
        (
            "My gadgets drawer is full of cables for devices I don't own anymore.",
            "That happens to everyone. A yearly clear-out helps.",
        ),
        (
            "I've been thinking about which devices I actually use every day.",
            "That's a useful exercise before buying anything new.",
        ),
    ],
    "grocery": [
        ("I'm trying to plan meals for the week so I stop wasting food.", "Meal planning really helps with that."),
        ("I've been cooking at home a lot more lately.", "That's great! It's healthier and cheaper too."),
    ],
    "generic": [
        (
            "My friend asked me for shopping advice and it made me think about my own habits.",
            "It's interesting how often we don't notice our own patterns until someone asks.",
        ),
        (
            "I returned two things last week and I'm annoyed at myself for buying them.",
            "That happens to everyone. Knowing what didn't work is useful for next time.",
        ),
        (
            "I want to stop impulse buying and be more deliberate about what I get.",
            "A good approach is to note what you actually reach for most often.",
        ),
        (
            "I've been going through my old online orders for some reason.",
            "That can be surprisingly revealing about what you really like.",
        ),
        (
            "Can I think out loud for a minute? I'm trying to understand my own taste.",
            "Of course, go ahead! Talking it through often helps.",
        ),
    ],
}

#: Small talk inside a needle (user, assistant), unrelated to preferences.
FILLERS: list[tuple[str, str]] = [
    ("Sorry, the cat just walked across my keyboard.", "No problem, cats have priorities!"),
    (
        "It's raining again here, perfect weather for this kind of thinking.",
        "A rainy afternoon is good for sorting things out.",
    ),
    ("I've had three coffees today, so bear with me.", "Ha, no worries, take your time."),
    ("My neighbour is drilling again, it's impossible to concentrate.", "That sounds annoying! Hope it stops soon."),
    ("Half my friends think I overthink this stuff.", "Thinking it through usually saves money in the end."),
]

NEEDLE_CLOSERS: list[tuple[str, str]] = [
    ("Anyway, thanks for listening to me ramble.", "Anytime! Happy to help whenever you need."),
    ("Okay, I think I have a plan now.", "Great, good luck with it!"),
    ("That helps, thanks.", "You're welcome. Let me know how it goes."),
    ("Right, I should get back to work.", "Sure, talk soon!"),
    ("Good chat, I feel more organised already.", "Glad to hear it!"),
]

# --------------------------------------------------------------------------- memory abilities

#: Knowledge update: the user turn that revises an earlier value. ``{old}``: the earlier value as
#: spoken, ``{item}``: the product (plural), ``{reason}``: a clause from :data:`REVISION_REASONS`;
#: the statement of the new value follows in the same turn. Every lead has a past cue ("used to",
#: "back then", "not anymore", ...), which the conflict detector reads as a revision.
REVISION_LEADS: list[str] = [
    "I used to go for {old} {item} without thinking, but {reason}, so that's changed.",
    "Back then I always picked {old} {item}; {reason}, and I've moved on from that.",
    "Small update about {item}: I used to be all about {old}, but {reason}.",
    "You know how I used to stick with {old} {item}? Well, {reason}, so not anymore.",
    "I've changed my mind about {item}. {reason_cap}, and {old} is not for me anymore.",
    "Funny, I used to swear by {old} {item}, but {reason}.",
]

#: Reasons a person gives for changing a preference (lower-case clauses).
REVISION_REASONS: list[str] = [
    "a friend pointed out it never really suited me",
    "the last ones I bought were a disappointment",
    "I started a new job and my days look different now",
    "my taste has shifted since I moved",
    "I got tired of the same thing after years of it",
    "I tried something else on holiday and never looked back",
    "I finally admitted it wasn't practical for the way I live",
    "a few bad experiences changed my mind",
]

#: Temporal: a sentence of the request pointing to a past conversation by its date (``{when}``: e.g.
#: "March 2023"); for an add-on deal it follows "For the <product type>, ".
TEMPORAL_REFS: list[str] = [
    "Go by what I told you about it when we talked in {when}.",
    "Stick to what I said I wanted for it in our chat from {when}.",
    "Use what I described to you back in {when}, not anything else I said about it.",
    "It should match what I told you in {when}.",
    "Remember our conversation in {when}? Go with what I said then.",
]

#: Abstention: a sentence of the request inviting a preference the user never stated (``{label}``:
#: the attribute as spoken, e.g. "colour"); for an add-on deal it follows "For the <product type>, ".
ABSTENTION_ASKS: list[str] = [
    "Pick the {label} I usually go for.",
    "Make sure it's my usual {label}.",
    "Go with the {label} you know I like.",
    "You remember what {label} I like, so use that.",
]

# --------------------------------------------------------------------------- instructions

#: Single-product requests ({item} with article, e.g. "a men's t-shirt").
SINGLE_INSTRUCTIONS: list[str] = [
    "Can you help me find {item}? I'd like something that suits my taste.",
    "I need {item}. Could you pick one that fits what I usually like?",
    "I'm shopping for {item} today. Please recommend one you think I'd actually want.",
    "Looking for {item}. You know my style by now, find me a good one.",
    "Time to replace my old one: I need {item}. What would you recommend for me?",
    "Could you look for {item} that matches my preferences?",
    "I'd like to buy {item}. Please choose one that fits everything I've told you about myself.",
    "Find me {item}, please, one I'd be happy with given what you know about me.",
    "I've decided to get {item}. Which one would you pick for me?",
    "Please recommend {item} that would suit me.",
    "Help me choose {item}; keep in mind what I like.",
    "I'm after {item}. Surprise me with one that really fits my taste.",
]

#: Add-on deal requests, built from these parts in one of a few orders.
ADDON_VOUCHER: list[str] = [
    "I have a voucher for {shop} (shop id {shop_id}): {discount} off once an order reaches {min_spend}.",
    "{shop} (shop id {shop_id}) sent me a coupon: spend at least {min_spend} and get {discount} off.",
    "There's a {discount}-off voucher in my account for {shop} (shop id {shop_id}), valid on orders of {min_spend} or more.",
    "I want to use a voucher from {shop} (shop id {shop_id}); it takes {discount} off orders from {min_spend} up.",
    "Good news: {shop} (shop id {shop_id}) gave me {discount} off if I spend {min_spend} or more there.",
]
ADDON_ITEMS: list[str] = [
    "I'd like to get {items} there.",
    "I'm thinking of picking up {items} from them.",
    "The plan is to buy {items} in one order.",
    "I need {items}, all from that shop.",
]
#: Item sentences that can open the request (they do not refer back to the shop).
ADDON_ITEMS_LEAD: list[str] = [
    "I'd like to get {items}.",
    "I'm planning to buy {items} in one order.",
    "I need {items}.",
]
ADDON_BUDGET: list[str] = [
    "After the discount I can spend at most {budget}.",
    "My limit is {budget} in total once the voucher is applied.",
    "I don't want to pay more than {budget} after the discount.",
    "The whole order has to come to {budget} or less after the voucher.",
]
ADDON_CLOSE: list[str] = [
    "Please choose ones that suit my taste.",
    "Find things I'd actually like.",
    "Pick what fits my preferences.",
    "Go with what you know I like.",
    "",
]

# --------------------------------------------------------------------------- product types

#: Finest catalog category -> how a shopper names one item of it.
ITEM_NAMES: dict[str, str] = {
    "Tshirts": "t-shirt",
    "Shirts": "shirt",
    "Casual Shoes": "pair of casual shoes",
    "Watches": "watch",
    "Sports Shoes": "pair of sports shoes",
    "Kurtas": "kurta",
    "Tops": "top",
    "Handbags": "handbag",
    "Heels": "pair of heels",
    "Sunglasses": "pair of sunglasses",
    "Wallets": "wallet",
    "Flip Flops": "pair of flip flops",
    "Sandals": "pair of sandals",
    "Belts": "belt",
    "Backpacks": "backpack",
    "Formal Shoes": "pair of formal shoes",
    "Jeans": "pair of jeans",
    "Shorts": "pair of shorts",
    "Trousers": "pair of trousers",
    "Flats": "pair of flats",
    "Dresses": "dress",
    "Track Pants": "pair of track pants",
    "Clutches": "clutch",
    "Sweatshirts": "sweatshirt",
    "Caps": "cap",
    "Sweaters": "sweater",
    "Jackets": "jacket",
    "Kurtis": "kurti",
    "Tunics": "tunic",
    "Leggings": "pair of leggings",
    "Capris": "pair of capris",
    "Skirts": "skirt",
    "Sports Sandals": "pair of sports sandals",
    "Laptop Bag": "laptop bag",
    "Duffel Bag": "duffel bag",
    "Messenger Bag": "messenger bag",
    "Lounge Pants": "pair of lounge pants",
    "Night suits": "night suit",
    "Nightdress": "nightdress",
    "Socks": "pair of socks",
    "Briefs": "pack of briefs",
    "Bra": "bra",
    "Sarees": "saree",
    "Earrings": "pair of earrings",
    "Perfume and Body Mist": "perfume",
    "Deodorant": "deodorant",
    "Lipstick": "lipstick",
    "Innerwear Vests": "vest",
    "Trunk": "pack of trunks",
    "Boxers": "pair of boxers",
    "Churidar": "churidar",
    "Jumpsuit": "jumpsuit",
    "Stoles": "stole",
    "Scarves": "scarf",
    "Ties": "tie",
    "Cufflinks": "pair of cufflinks",
    "Bracelet": "bracelet",
    "Pendant": "pendant",
    "Ring": "ring",
    "Necklace and Chains": "necklace",
    "Nail Polish": "nail polish",
    "Kajal and Eyeliner": "eyeliner",
    "Lip Gloss": "lip gloss",
    "Foundation and Primer": "foundation",
    "Highlighter and Blush": "blush",
    "Tracksuits": "tracksuit",
    "Rain Jacket": "rain jacket",
    "Blazers": "blazer",
    "Waistcoat": "waistcoat",
    "Shrug": "shrug",
    "Dupatta": "dupatta",
    "Salwar": "salwar",
    "Patiala": "patiala",
    "Camisoles": "camisole",
    "Swimwear": "swimsuit",
    "Mobile Pouch": "mobile pouch",
    "Rucksacks": "rucksack",
    "Trolley Bag": "trolley bag",
    "Tablet Sleeve": "tablet sleeve",
    "Headband": "headband",
    "Hat": "hat",
    "Umbrellas": "umbrella",
    "Gloves": "pair of gloves",
    "Mufflers": "muffler",
    "Lounge Shorts": "pair of lounge shorts",
    "Booties": "pair of booties",
}

#: Finest catalog category -> plural ways a user refers to the type in conversation (mostly other
#: words than the request's product type, as people do).
ITEM_SYNONYMS: dict[str, list[str]] = {
    "Tshirts": ["tees", "crew tops", "casual tops"],
    "Shirts": ["button-downs", "collared shirts", "office shirts"],
    "Casual Shoes": ["sneakers", "everyday footwear", "weekend kicks"],
    "Sports Shoes": ["trainers", "running kicks", "gym footwear"],
    "Formal Shoes": ["office footwear", "dress shoes", "brogues and oxfords"],
    "Watches": ["wristwatches", "timepieces"],
    "Kurtas": ["ethnic tops", "kurtas"],
    "Kurtis": ["ethnic tunics", "kurtis"],
    "Tops": ["blouses", "tops"],
    "Handbags": ["purses", "totes", "everyday bags"],
    "Heels": ["heeled shoes", "pumps", "party footwear"],
    "Sunglasses": ["shades", "sunnies"],
    "Wallets": ["card holders", "billfolds"],
    "Flip Flops": ["slippers", "beach footwear", "pool slides"],
    "Sandals": ["open footwear", "strappy summer shoes"],
    "Belts": ["waist belts", "buckled straps"],
    "Backpacks": ["rucksacks", "day packs"],
    "Jeans": ["denims", "denim bottoms"],
    "Shorts": ["half pants", "summer bottoms"],
    "Trousers": ["chinos", "slacks", "pants"],
    "Flats": ["ballerinas", "flat shoes"],
    "Dresses": ["frocks", "one-pieces"],
    "Track Pants": ["joggers", "sweatpants", "trackies"],
    "Sweatshirts": ["hoodies", "sweats"],
    "Caps": ["baseball caps", "headwear"],
    "Sweaters": ["jumpers", "knitwear"],
    "Jackets": ["outerwear", "coats"],
    "Socks": ["ankle socks", "socks"],
    "Briefs": ["underwear", "undies"],
    "Perfume and Body Mist": ["fragrances", "scents", "body mists"],
    "Deodorant": ["deos", "antiperspirants"],
    "Earrings": ["studs", "ear jewellery"],
    "Skirts": ["midis and minis", "skirts"],
    "Leggings": ["tights", "stretch pants"],
    "Clutches": ["evening bags", "clutches"],
    "Laptop Bag": ["laptop sleeves and bags", "work bags"],
    "Duffel Bag": ["gym bags", "weekend holdalls"],
}

#: Second category level (Myntra) -> group words, used when the finest category has no entry above.
GROUP_SYNONYMS: dict[str, list[str]] = {
    "Topwear": ["tops", "things I wear on top"],
    "Bottomwear": ["bottoms"],
    "Shoes": ["footwear"],
    "Sandal": ["open footwear"],
    "Bags": ["bags"],
    "Innerwear": ["innerwear", "undergarments"],
    "Jewellery": ["jewellery"],
    "Eyewear": ["eyewear"],
    "Fragrance": ["fragrances"],
    "Lips": ["lip products"],
    "Nails": ["nail products"],
    "Makeup": ["makeup"],
    "Headwear": ["headwear"],
    "Loungewear and Nightwear": ["loungewear", "sleepwear"],
    "Skin Care": ["skincare"],
    "Skin": ["skincare"],
}

#: Gender attribute value -> possessive used in product types.
GENDER_WORDS: dict[str, str] = {
    "Men": "men's",
    "Women": "women's",
    "Boys": "boys'",
    "Girls": "girls'",
    "Unisex": "unisex",
}

#: Category names that name an audience or a department, not a product type.
GENERIC_CATEGORIES: frozenset[str] = frozenset(
    {
        "men",
        "women",
        "boys",
        "girls",
        "unisex",
        "kids",
        "baby",
        "all",
        "other",
        "others",
        "misc",
        "miscellaneous",
        "new arrivals",
        "sale",
        "clothing",
        "apparel",
        "accessories",
        "shoes & clothing",
        "clothing, shoes & jewelry",
        "all departments",
        "everything else",
        "home",
        "default",
    }
)

#: Top-level categories of things nobody shops for (free gifts, vouchers).
NOT_FOR_SALE_CATEGORIES: frozenset[str] = frozenset({"free items", "free gifts", "vouchers"})

#: Nouns used in the plural for one item ("a pair of jeans").
PAIR_NOUNS: frozenset[str] = frozenset(
    {
        "jeans",
        "trousers",
        "shorts",
        "pants",
        "leggings",
        "socks",
        "shoes",
        "sneakers",
        "boots",
        "sandals",
        "slippers",
        "heels",
        "flats",
        "loafers",
        "gloves",
        "sunglasses",
        "glasses",
        "headphones",
        "earphones",
        "earbuds",
        "scissors",
        "tongs",
        "pliers",
        "tights",
        "pajamas",
        "pyjamas",
        "boxers",
        "earrings",
        "cufflinks",
        "binoculars",
        "goggles",
        "joggers",
        "chinos",
        "capris",
        "trainers",
        "mittens",
        "clogs",
        "espadrilles",
        "overalls",
        "suspenders",
    }
)

#: Last words that name a mass or a kind of goods: the item gets "product" appended.
MASS_SUFFIXES: tuple[str, ...] = (
    "care",
    "ware",
    "wear",
    "food",
    "foods",
    "supplies",
    "equipment",
    "makeup",
    "jewellery",
    "jewelry",
    "hygiene",
    "grooming",
    "bedding",
    "decor",
    "storage",
    "ayurveda",
    "nutrition",
)

#: Attribute values that say nothing a shopper would prefer (compared lowercased).
UNINFORMATIVE_VALUES: frozenset[str] = frozenset(
    {
        "na",
        "n/a",
        "none",
        "other",
        "others",
        "regular",
        "multi",
        "no",
        "yes",
        "",
        "single",
        "default",
        "not applicable",
        "unknown",
        "standard",
        "assorted",
        "basic",
        "generic",
        "true",
        "false",
        "all",
        "one size",
        "onesize",
        "free size",
        "various",
        "see description",
        "as shown",
        "multicolor",
        "general",
        "multicolour",
        "multi-color",
        "multi color",
    }
)

#: Attribute keys that are not product properties a user would prefer (compared lowercased).
BLOCKED_KEYS: frozenset[str] = frozenset(
    {
        "year",
        "age_group",
        "gender",
        "season",
        "designer",
        "depth_cm",
        "height_cm",
        "width_cm",
        "other_colors",
        "sellable_online",
        "availability",
        "type",
        "brick",
        "main trend",
        "multipack set",
        "units per bundle",
        "total shelf life in months",
        "minimum shelf life in months",
        "minimum usable period in months",
        "number of components",
        "fine jewellery",
        "assorted",
        "reversible",
        "tablet sleeve",
        "fabric 2",
        "features 2",
        "colour1",
        "number of main compartments",
        "number of pockets",
        "number of inner pockets",
        "trends",
        "make",
        "warranty",
        "colour shade name",
        "colour family",
        "surface styling",
        "pattern coverage",
        "top type",
        "bottom type",
        "brand fit name",
        "business unit",
        "class",
        "family",
        "segment",
        "micro trend",
        "sub trend",
        "fabric 3",
        "features 3",
        "processing time",
        "colour hex code",
        "content",
        "stitch",
        "player type",
        "players",
        "set size",
        "top design styling",
        "design styling",
        # Amazon details keys that are logistics or identifiers
        "product dimensions",
        "item weight",
        "date first available",
        "manufacturer",
        "best sellers rank",
        "item model number",
        "upc",
        "asin",
        "is discontinued by manufacturer",
        "package dimensions",
        "department",
        "country of origin",
        "batteries",
        "number of items",
        "unit count",
        "item package quantity",
        "model name",
        "customer reviews",
        "global trade identification number",
        "manufacturer part number",
        "part number",
        "item dimensions lxwxh",
        "item dimensions l x w x h",
        "included components",
        "specification met",
        "age range (description)",
        "recommended uses for product",
        "release date",
        "language",
        "number of pieces",
        "product care instructions",
        "import",
    }
)

#: Raw attribute key (lowercased) -> canonical label used in gold preferences.
LABEL_FOR_KEY: dict[str, str] = {
    "base_colour": "colour",
    "primary_color": "colour",
    "color": "colour",
    "colour": "colour",
    "print or pattern type": "print",
    "fastening and back detail": "fastening",
    "scent": "scent",
    "brand": "brand",
    "size": "size",
}

#: Sampling weight of a label when choosing wanted features (default 1.0).
LABEL_WEIGHTS: dict[str, float] = {
    "colour": 3.0,
    "fabric": 2.5,
    "material": 2.5,
    "pattern": 2.0,
    "print": 1.5,
    "fit": 2.0,
    "neck": 2.0,
    "sleeve length": 2.0,
    "brand": 1.2,
    "size": 0.6,
    "usage": 0.5,
    "occasion": 0.5,
    "wash care": 0.5,
}

#: Label -> how it is said in conversation (default: the label itself).
LABEL_SPOKEN: dict[str, str] = {"neck": "neckline", "print": "print", "usage": "kind of wear", "features": "features"}

#: Currency code -> how amounts are written.
CURRENCY_SIGNS: dict[str, str] = {"INR": "₹", "USD": "$", "EUR": "€", "GBP": "£", "SAR": "SAR "}

# --------------------------------------------------------------------------- situation openers

#: Life-event and situation openers (user, assistant) for any domain: a needle often starts far
#: from shopping, so the request's product type is not the first thing said.
SITUATION_OPENERS: list[tuple[str, str]] = [
    (
        "We're moving to a new city in a couple of months and I'm trying to get organised.",
        "A big move! Making lists early really takes the stress out of it.",
    ),
    (
        "I just started a new job and my whole routine has changed.",
        "Congratulations! New routines take a few weeks to settle.",
    ),
    (
        "My sister is getting married in the spring and the family group chat is chaos.",
        "Weddings do that to families! It's lovely though.",
    ),
    (
        "I've been trying to save money this year, so I'm thinking harder about everything I buy.",
        "That's a good habit. Knowing what you really use helps a lot.",
    ),
    (
        "We had a baby three months ago, so life is a bit upside down.",
        "Congratulations! The first months are a whirlwind.",
    ),
    (
        "I signed up for a half marathon, which is either brave or silly.",
        "Brave, definitely! Training gives a nice structure to the week.",
    ),
    ("My flatmate moved out, so I have the whole place to myself now.", "Enjoy the space! It's a fresh start."),
    (
        "I'm back from two weeks of travelling and still unpacking.",
        "Welcome back! Unpacking is always the least fun part.",
    ),
    (
        "I turned forty last week and I'm in a reflective mood.",
        "Happy birthday! Milestones are a good moment to take stock.",
    ),
    (
        "It's been a long week, I need to talk about something other than work.",
        "Of course, let's take your mind off it. What's on your mind?",
    ),
]

# --------------------------------------------------------------------------- topic distractors

#: Sessions that talk about the product type or its domain but state no preference of the user:
#: practical questions, history, buying advice. Each is a list of (user, assistant) exchanges;
#: user turns use no first-person words, so the conflict detector never reads a statement in them.
#: Placeholders: ``{item}`` the product type, ``{an_item}`` with its article, ``{items}`` a plural
#: everyday name. Domain ``generic`` fits every product type.
DISTRACTORS: dict[str, list[list[tuple[str, str]]]] = {
    "generic": [
        [
            (
                "Is it a good idea to buy {an_item} online, or is it better to see it in a shop first?",
                "Both work. Online gives more choice and reviews; in a shop you can check the quality with your own hands. Good return policies make online buying less risky.",
            ),
            (
                "What should someone look out for in the reviews?",
                "Look for comments on durability after a few months and on whether the product matches its photos and description.",
            ),
        ],
        [
            (
                "How did people make {items} before factories existed?",
                "Mostly by hand, in small workshops, and each piece took far longer. Industrial production made them cheaper and more uniform.",
            ),
            (
                "Interesting. When did mass production start?",
                "For most everyday goods it spread during the nineteenth and early twentieth centuries, with steam and later electric machinery.",
            ),
        ],
        [
            (
                "How long does {an_item} usually last with normal use?",
                "It depends on the quality and the care it gets, but a well-made one can last several years. Following the care instructions helps the most.",
            ),
            (
                "Is it worth repairing one instead of replacing it?",
                "Often, yes: small repairs are cheap and keep things out of landfill. For very cheap items a repair may cost more than a new one.",
            ),
        ],
        [
            (
                "A friend is moving abroad next month. What's the best way to pack {items} for the move?",
                "Clean and dry everything first, wrap delicate pieces, fill gaps so nothing shifts, and label the boxes by room.",
            ),
            (
                "Should the boxes be full or half empty?",
                "Full but not overloaded: half-empty boxes get crushed, and very heavy ones are hard to carry.",
            ),
        ],
        [
            (
                "Are there good ways to recycle {items} that are worn out?",
                "Many towns have textile or electronics collection points, and some brands take old products back. Donating anything still usable is another option.",
            ),
            (
                "What happens to the donated ones?",
                "They are sorted: some are resold, others are recycled into raw material.",
            ),
        ],
    ],
    "clothing": [
        [
            (
                "How should {an_item} be washed so it doesn't shrink?",
                "Wash it inside out in cool water, skip the hot dryer and let it dry flat or on a hanger. Check the care label first.",
            ),
            (
                "Does fabric softener help?",
                "A little, but too much can leave residue. Most modern detergents are enough.",
            ),
        ],
        [
            (
                "Where does the word for {items} come from?",
                "Many clothing names come from places, people or older garments they evolved from. Etymology dictionaries usually have the story.",
            ),
            (
                "Do clothes in general change a lot from decade to decade?",
                "The basics stay similar, but cuts, lengths and details shift with fashion cycles roughly every ten to twenty years.",
            ),
        ],
        [
            (
                "What's the best way to store {items} when the season changes?",
                "Clean everything first, fold knits rather than hanging them, and use breathable boxes or bags with a cedar block against moths.",
            ),
            (
                "Vacuum bags, good or bad?",
                "Fine for bulky items for a few months, but they can crease delicate pieces.",
            ),
        ],
        [
            (
                "How do clothing sizes differ between countries?",
                "Quite a lot: UK, US, EU and Asian sizes use different scales, and brands vary too. Measurement charts are more reliable than the size label.",
            ),
            (
                "Why aren't sizes standardised?",
                "There have been attempts, but brands like to size for their own customers.",
            ),
        ],
    ],
    "footwear": [
        [
            (
                "How should {items} be cleaned without ruining them?",
                "Brush off dirt first, use a damp cloth with mild soap, and let them air-dry away from heaters. Stuffing them with paper keeps the shape.",
            ),
            (
                "Is the washing machine ever okay?",
                "For some canvas and mesh trainers, on a gentle cycle in a bag; never for leather.",
            ),
        ],
        [
            (
                "What's the history of the sneaker, actually?",
                "Rubber-soled canvas shoes appeared in the nineteenth century; the name came from how quietly you could sneak in them. Sports brands made them mainstream in the twentieth century.",
            ),
            ("When did they become fashion items?", "From the 1980s on, with basketball and hip-hop culture."),
        ],
        [
            (
                "How often should {items} be replaced?",
                "Running shoes after roughly 500 to 800 km; everyday shoes when the sole wears through or the support is gone.",
            ),
            ("Can a cobbler fix worn soles?", "Yes, for stitched soles especially; glued ones are harder."),
        ],
    ],
    "accessories": [
        [
            (
                "How should {an_item} be cleaned and looked after?",
                "Wipe it with a soft cloth, keep it away from perfume and water where possible, and store it in a dust bag or box.",
            ),
            ("Any tips for travelling with it?", "Pack it in the middle of the suitcase, wrapped in something soft."),
        ],
        [
            (
                "When did people start carrying {items}?",
                "Versions of most accessories go back centuries; the modern forms mostly date from the nineteenth and twentieth centuries.",
            ),
            ("Were they status symbols back then?", "Often, yes, especially when materials were expensive."),
        ],
    ],
    "beauty": [
        [
            (
                "How long does {an_item} keep once it's opened?",
                "Look for the small open-jar symbol with a number of months; most products last six to twenty-four months after opening.",
            ),
            ("Does the fridge help?", "For a few products, but usually a cool dark cupboard is enough."),
        ],
        [
            (
                "Is it true that expensive cosmetics work better than cheap ones?",
                "Not necessarily. Price reflects packaging and marketing as much as ingredients; the ingredient list tells you more.",
            ),
            ("How are new products tested?", "For safety and stability, following regulations that vary by country."),
        ],
    ],
    "home": [
        [
            (
                "Is it a good idea to buy {an_item} online without seeing it?",
                "It can work if you measure the space carefully, read the dimensions twice and check the return conditions for bulky items.",
            ),
            ("What about assembly?", "Check whether tools are included and how long reviewers say it took."),
        ],
        [
            (
                "How should {items} be cleaned and maintained?",
                "Dust regularly, wipe spills quickly and follow the manufacturer's care notes; a yearly deeper clean keeps things looking new.",
            ),
            ("Any tips for moving them?", "Empty and disassemble what you can, and wrap corners to avoid dents."),
        ],
    ],
    "electronics": [
        [
            (
                "How long should {an_item} normally last?",
                "Usually three to seven years depending on use; batteries tend to wear out first.",
            ),
            (
                "Are extended warranties worth it?",
                "Rarely for cheaper devices; more often for expensive ones you rely on daily.",
            ),
        ],
        [
            (
                "What's the right way to dispose of old {items}?",
                "Take them to an electronics recycling point; many shops accept old devices when you buy new ones.",
            ),
            ("Should the data be wiped first?", "Yes, a factory reset and removing any storage card is a good idea."),
        ],
    ],
    "grocery": [
        [
            (
                "How should {items} be stored so they keep longer?",
                "In a cool, dry place in an airtight container, away from sunlight; check the label for anything that needs the fridge after opening.",
            ),
            (
                "What does 'best before' actually mean?",
                "Quality, not safety: the food is often fine after that date if stored well.",
            ),
        ],
        [
            (
                "Is buying {items} in bulk actually cheaper?",
                "Often per unit, yes, but only if it gets used before it goes stale; compare the price per kilo or litre on the shelf label.",
            ),
            (
                "Any tips for not wasting food?",
                "Plan meals, keep older items at the front, and freeze what you won't use soon.",
            ),
        ],
    ],
}
