"""The needle model's text (issue 41), in plain Python: filler sentences over bytes with code-word
facts planted in them and a question about one fact at the end. scripts/model/train.py trains on
it; scripts/model/check.py asks the trained model the same way.
"""

WORDS = ("the a river stone house over under near old quiet small bright cold warm field road "
         "tree light water window garden morning evening market bridge valley harbor north "
         "south east west through across along beside slowly often never always people walk "
         "carry build watch follow remember").split()
KEYS = ("amber birch cedar delta ember falcon garnet heron indigo juniper kestrel lotus maple "
        "nimbus onyx pepper quartz raven saffron tundra umber violet willow xenon yarrow zephyr "
        "acorn basil cobalt dune").split()
CODE_CHARS = "ABCDEFGHJKLMNPQRSTUVWXYZ23456789"


def code_word(rng):
    return "".join(rng.choice(CODE_CHARS) for _ in range(6))


def fact(key, code):
    return f"The code word for {key} is {code}. "


def question(key):
    return f"Q: What is the code word for {key}? A: "


def filler(rng, n_bytes):
    out = []
    size = 0
    while size < n_bytes:
        s = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 12))).capitalize() + ". "
        out.append(s)
        size += len(s)
    return "".join(out)[:n_bytes]


def document(rng, n_bytes, n_facts=3):
    """Filler of about n_bytes with n_facts facts at random places, then a question about one of
    them and its answer. Returns (text, start of the answer in bytes)."""
    keys = rng.sample(KEYS, n_facts)
    codes = [code_word(rng) for _ in keys]
    asked = rng.randrange(n_facts)
    tail = question(keys[asked]) + codes[asked] + "\n"
    body = filler(rng, max(0, n_bytes - len(tail) - sum(len(fact(k, c)) for k, c in zip(keys, codes))))
    cuts = sorted(rng.randint(0, len(body)) for _ in keys)
    parts, prev = [], 0
    for cut, k, c in zip(cuts, keys, codes):
        parts += [body[prev:cut], fact(k, c)]
        prev = cut
    parts.append(body[prev:])
    text = "".join(parts) + tail
    return text, len(text) - len(codes[asked]) - 1
