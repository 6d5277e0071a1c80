"""Phrasing banks of the offline template generator (our own wording).

Preferences are revealed indirectly: the user talks about habits, past purchases, comfort or
what people say about them, never "I want a product with attribute X". Each bank holds several
phrasings so needles are not found by matching one fixed sentence.
"""

from __future__ import annotations

# Attribute key of the catalog -> (human label used in gold preferences, phrasings with {v}).
PREFERENCE_PHRASES: dict[str, tuple[str, list[str]]] = {
    "base_colour": ("colour", [
        "Funny thing, I noticed nearly everything I grab in the morning is {v}. It just feels like me.",
        "My sister teases me because I come home with something {v} every single time.",
        "When I have a choice I go for {v}; other shades never look right on me.",
        "I keep trying to branch out but honestly {v} is what I end up wearing.",
        "People at work say they can spot me from across the room because I'm always in {v}.",
    ]),
    "Fabric": ("fabric", [
        "My skin gets irritated by a lot of materials. {v} is the one I can wear all day without thinking about it.",
        "Everything that isn't {v} ends up at the back of my wardrobe, I just don't feel comfortable in it.",
        "After a few bad experiences I check the label now, and if it's not {v} I put it back.",
        "I run warm, so {v} is pretty much the only thing that works for me.",
    ]),
    "Fit": ("fit", [
        "I've figured out that a {v} suits my build best; anything else just hangs wrong.",
        "The tailor told me years ago to stick to {v} and I never looked back.",
        "Whenever I order something that isn't {v} I end up returning it.",
    ]),
    "Neck": ("neckline", [
        "Strange detail, but I always end up with a {v}. Other necklines feel off on me.",
        "I feel most comfortable in a {v}, the rest somehow never sit right.",
        "My partner says the {v} is my signature look, and I think they're right.",
    ]),
    "Sleeve Length": ("sleeve length", [
        "I'm much happier in {v}, honestly, whatever the weather.",
        "Call it a habit, but I reach for {v} nine times out of ten.",
        "I find {v} the most practical for how I live.",
    ]),
    "Pattern": ("pattern", [
        "I'm a {v} person through and through when it comes to clothes.",
        "Looking at my closet, it's almost all {v}. I guess that's my taste.",
        "Busy designs give me a headache; {v} is what I keep coming back to.",
    ]),
    "Material": ("material", [
        "I've had the best luck with {v}; it's held up better than anything else I've owned.",
        "For me it has to be {v}, the other stuff falls apart after a season.",
        "I trust {v}. Learned that the hard way after a cheap pair gave up on me.",
    ]),
    "Closure": ("closure", [
        "I'm impatient in the mornings so a {v} closure is a must for me.",
        "I always look for a {v} closure, the others drive me mad.",
    ]),
    "Fastening": ("fastening", [
        "I can't be bothered with anything fiddly, {v} is what I always pick.",
        "My feet and my patience both prefer {v}, to be honest.",
    ]),
    "Display": ("watch display", [
        "I'm firmly in the {v} camp when it comes to watch faces.",
        "I've only ever worn {v} watches and I don't see that changing.",
    ]),
    "Waist Rise": ("waist rise", [
        "{v} is the only cut that's actually comfortable for me when I sit all day.",
        "After years of trial and error, {v} is what works for my body.",
    ]),
    "Ankle Height": ("ankle height", [
        "I like my shoes {v}, it gives my ankles the right amount of support.",
        "Somehow I always end up buying {v} pairs.",
    ]),
    "Sport": ("sport", [
        "These days most of my free time goes into {v}, so I buy with that in mind.",
        "I've been really into {v} lately, three times a week at least.",
    ]),
    "Print or Pattern Type": ("print", [
        "I have a soft spot for {v} prints, they always cheer me up.",
        "If there's a {v} option I'll pick it, that's just my style.",
    ]),
    "Sleeve Styling": ("sleeve style", [
        "I always end up choosing {v}, they're the most comfortable for me.",
    ]),
    "Length": ("length", [
        "{v} is the length I feel best in, I rarely buy anything else.",
        "I've noticed I keep picking {v} styles, they just suit me.",
    ]),
    "color": ("colour", [
        "My friends joke that my wardrobe only comes in {v}, and they're not wrong.",
        "Whenever there's a {v} version I take that one.",
    ]),
    "primary_color": ("colour", [
        "I keep gravitating to {v}, it's been my colour for years.",
        "Honestly I'd pick {v} over any other colour.",
    ]),
}

# Attribute values that say nothing a shopper would prefer.
UNINFORMATIVE_VALUES = {"na", "n/a", "none", "other", "others", "regular", "multi", "no", ""}

NEEDLE_OPENERS: list[tuple[str, str]] = [
    ("I'm finally clearing out my wardrobe this weekend, it's a mess.",
     "That sounds like a good project! Sorting into keep, donate and repair piles usually helps."),
    ("I've got a big trip coming up and I'm trying to figure out what to pack.",
     "Exciting! Packing around a few versatile pieces makes things much easier."),
    ("My friend asked me for shopping advice and it made me think about my own habits.",
     "It's interesting how often we don't notice our own patterns until someone asks."),
    ("I returned two things last week and I'm annoyed at myself for buying them.",
     "That happens to everyone. Knowing what didn't work is useful for next time."),
    ("I've been reading about building a capsule wardrobe.",
     "Capsule wardrobes are great: fewer pieces that all go together."),
    ("Work is starting a new dress policy next month, so I'm rethinking what I wear.",
     "Changes like that are a good moment to see what really works for you."),
    ("I want to stop impulse buying and be more deliberate about what I get.",
     "A good approach is to note what you actually reach for most often."),
]

ASSISTANT_ACKS: list[str] = [
    "That's really useful to know about yourself.",
    "Makes sense. Sticking to what you're comfortable in saves a lot of returns.",
    "Good to know! It sounds like you have a clear sense of what works for you.",
    "That's a helpful rule of thumb when shopping.",
    "I'll keep that in mind if you ask me for suggestions later.",
    "Plenty of people feel the same way, it's a sensible preference.",
]

NEEDLE_CLOSERS: list[tuple[str, str]] = [
    ("Anyway, thanks for listening to me ramble.", "Anytime! Happy to help whenever you need."),
    ("Okay, I think I have a plan now.", "Great, good luck with it!"),
    ("That helps, thanks.", "You're welcome. Let me know how it goes."),
]

INSTRUCTION_TEMPLATES: list[str] = [
    "Can you help me find a {item}? I'd like something that suits my taste.",
    "I need a new {item}. Could you pick one that fits what I usually like?",
    "I'm shopping for a {item} today. Please recommend one you think I'd actually wear.",
    "Looking for a {item}. You know my style by now, find me a good one.",
    "Time to replace my old {item}. What would you recommend for me?",
    "Could you look for a {item} that matches my preferences?",
]

# Finest catalog category -> how a shopper names one item of it.
ITEM_NAMES: dict[str, str] = {
    "Tshirts": "t-shirt", "Shirts": "shirt", "Casual Shoes": "pair of casual shoes",
    "Watches": "watch", "Sports Shoes": "pair of sports shoes", "Kurtas": "kurta", "Tops": "top",
    "Handbags": "handbag", "Heels": "pair of heels", "Sunglasses": "pair of sunglasses",
    "Wallets": "wallet", "Flip Flops": "pair of flip flops", "Sandals": "pair of sandals",
    "Belts": "belt", "Backpacks": "backpack", "Formal Shoes": "pair of formal shoes",
    "Jeans": "pair of jeans", "Shorts": "pair of shorts", "Trousers": "pair of trousers",
    "Flats": "pair of flats", "Dresses": "dress", "Track Pants": "pair of track pants",
    "Clutches": "clutch", "Sweatshirts": "sweatshirt", "Caps": "cap", "Sweaters": "sweater",
    "Jackets": "jacket", "Kurtis": "kurti", "Tunics": "tunic", "Leggings": "pair of leggings",
    "Capris": "pair of capris", "Skirts": "skirt", "Sports Sandals": "pair of sports sandals",
    "Laptop Bag": "laptop bag", "Duffel Bag": "duffel bag", "Messenger Bag": "messenger bag",
    "Lounge Pants": "pair of lounge pants", "Night suits": "night suit", "Nightdress": "nightdress",
}

GENDER_WORDS: dict[str, str] = {
    "Men": "men's", "Women": "women's", "Boys": "boys'", "Girls": "girls'", "Unisex": "unisex",
}
