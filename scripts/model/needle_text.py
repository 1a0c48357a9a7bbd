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
    """The question repeats the fact's words up to its code word, so that retrieval is copying
    what followed the same words earlier (the induction pattern small models learn)."""
    return f"Q: The code word for {key} is "


def filler(rng, n_bytes, echo=0.0):
    """Sentences of random words, n_bytes of them. With echo > 0, that share of the sentences
    carry a random code-like tag that a later sentence repeats: copying what followed an earlier
    occurrence (the induction pattern that retrieval is built on) then pays everywhere in the
    text, not only at the few answers (without it the model never learned to copy)."""
    out = []
    size = 0
    pending = []
    while size < n_bytes:
        words = [rng.choice(WORDS) for _ in range(rng.randint(5, 12))]
        if pending and rng.random() < 0.5:
            words.insert(rng.randrange(len(words) + 1), pending.pop(0))
        elif echo and rng.random() < echo:
            tag = code_word(rng)
            words.insert(rng.randrange(len(words) + 1), tag)
            pending.append(tag)
        s = " ".join(words) + ". "
        s = s[0].upper() + s[1:]
        out.append(s)
        size += len(s)
    return "".join(out)[:n_bytes]


def document(rng, n_bytes, n_facts=3, n_questions=1, echo=0.0):
    """Filler of about n_bytes with n_facts facts at random places, then n_questions questions
    about distinct ones, each followed by its answer. Returns (text, the answers' starts in
    bytes)."""
    keys = rng.sample(KEYS, n_facts)
    codes = [code_word(rng) for _ in keys]
    asked = rng.sample(range(n_facts), n_questions)
    tails = [question(keys[i]) + codes[i] + "\n" for i in asked]
    size = sum(len(t) for t in tails) + sum(len(fact(k, c)) for k, c in zip(keys, codes))
    body = filler(rng, max(0, n_bytes - size), echo)
    cuts = sorted(rng.randint(0, len(body)) for _ in keys)
    parts, prev = [], 0
    for cut, k, c in zip(cuts, keys, codes):
        parts += [body[prev:cut], fact(k, c)]
        prev = cut
    parts.append(body[prev:])
    text = "".join(parts)
    answers = []
    for t, i in zip(tails, asked):
        answers.append(len(text) + len(t) - len(codes[i]) - 1)
        text += t
    return text, answers


def needle_prompt(rng, depth, fraction):
    """A document of about `depth` bytes: the asked fact at `fraction` of it, two distractor facts
    elsewhere, then the question. Returns (prompt, code word)."""
    keys = rng.sample(KEYS, 3)
    codes = [code_word(rng) for _ in keys]
    facts = [fact(k, c) for k, c in zip(keys, codes)]
    body = filler(rng, max(0, depth - sum(len(f) for f in facts)))
    cuts = [int(fraction * len(body)), rng.randint(0, len(body)), rng.randint(0, len(body))]
    pieces = sorted(zip(cuts, facts), key=lambda x: x[0])
    text, prev = "", 0
    for cut, f in pieces:
        text += body[prev:cut] + f
        prev = cut
    text += body[prev:] + question(keys[0])
    return text, codes[0]


def induction_drill(rng, n_bytes, pool=8):
    """n_bytes of code words drawn again and again from a pool of `pool` fresh ones: every
    character after a word's first is predictable only by copying what followed that word's
    first character earlier (an induction head), the pattern retrieval builds on; a curriculum
    document for train.py (--drill)."""
    words = [code_word(rng) for _ in range(pool)]
    out = []
    size = 0
    while size < n_bytes:
        w = rng.choice(words) + " "
        out.append(w)
        size += len(w)
    return "".join(out)[:n_bytes]
