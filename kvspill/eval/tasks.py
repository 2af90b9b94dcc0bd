"""Synthetic long-context tasks (RULER-style), built to a token length, seeded and deterministic.

Each task builds a prompt from a filler of `units` pieces and a few planted facts, and names the
answer strings a correct completion contains. `make_samples` searches the number of units so that
the prompt (in the model's own tokens) is as long as possible within the target length.

Tasks (after RULER, Hsieh et al. 2024, and the passkey test of Mohtashami and Jaggi 2023):
- passkey: a 5-digit key hidden at a random depth of repeated noise sentences;
- niah_multikey: four "special magic number" needles with different keys; one key is asked;
- variable_tracking: a chain of 5 assignments (VAR A = 12345, VAR B = VAR A, ...) spread in
  noise; every variable that holds the value is asked;
- common_words: a numbered word list in which 10 words repeat often; the 10 are asked;
- code: real Python standard-library source files (of the running interpreter, chosen by the
  seed; no download) concatenated; the defining line of a function that occurs once is asked.

Invariants:
- A sample depends only on (seed, task, target length, index) and the tokenizer: the random
  generator is seeded from those, and the filler grows by appending (the planted facts keep
  their relative depth).
- Every answer string occurs in the prompt (tests/eval check it for every task).
- Pure Python: no torch; the caller passes `count_tokens`.
"""

from __future__ import annotations

import functools
import hashlib
import random
import sysconfig
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CountTokens = Callable[[str], int]

NOISE = "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class Sample:
    """One prompt and what a correct greedy completion contains."""

    task: str
    target_tokens: int  # the length asked for (prompt + max_tokens)
    index: int
    prompt: str
    answers: tuple[str, ...]  # the score is the fraction of these found in the output
    max_tokens: int  # tokens to generate
    num_prompt_tokens: int


def _rng(seed: int, task: str, target_tokens: int, index: int, draw: int = 0) -> random.Random:
    key = f"{seed}/{task}/{target_tokens}/{index}" + (f"/{draw}" if draw else "")  # draw 0: as before
    digest = hashlib.sha256(key.encode()).digest()
    return random.Random(int.from_bytes(digest[:8], "little"))


def _pseudo_word(rng: random.Random, syllables: int = 3) -> str:
    return "".join(rng.choice(_CONSONANTS) + rng.choice(_VOWELS) for _ in range(syllables))


def _insert_at_depths(pieces: list[str], facts: list[str], rng: random.Random) -> list[str]:
    """`pieces` with each fact inserted at a random depth (facts keep their order)."""
    depths = sorted(rng.random() for _ in facts)
    out = list(pieces)
    for depth, fact in reversed(list(zip(depths, facts, strict=True))):
        out.insert(round(depth * len(pieces)), fact)
    return out


def passkey(rng: random.Random, units: int) -> tuple[str, tuple[str, ...]]:
    key = str(rng.randint(10000, 99999))
    needle = f"The pass key is {key}. Remember it. {key} is the pass key. "
    body = "".join(_insert_at_depths([NOISE] * units, [needle], rng))
    intro = (
        "There is an important info hidden inside a lot of irrelevant text. Find it and memorize it. "
        "I will quiz you about the important information there.\n"
    )
    return f"{intro}{body}\nWhat is the pass key? The pass key is", (key,)


def niah_multikey(rng: random.Random, units: int) -> tuple[str, tuple[str, ...]]:
    keys: list[str] = []
    while len(keys) < 4:
        word = f"{_pseudo_word(rng, 2)}-{_pseudo_word(rng, 3)}"
        if word not in keys:
            keys.append(word)
    values = [str(rng.randint(1000000, 9999999)) for _ in keys]
    needles = [
        f"One of the special magic numbers for {k} is: {v}. " for k, v in zip(keys, values, strict=True)
    ]
    rng.shuffle(needles)
    asked = rng.randrange(len(keys))
    body = "".join(_insert_at_depths([NOISE] * units, needles, rng))
    intro = "Some special magic numbers are hidden within the following text. Make sure to memorize them.\n"
    question = (
        f"\nWhat is the special magic number for {keys[asked]} mentioned in the provided text? "
        f"The special magic number for {keys[asked]} mentioned in the provided text is"
    )
    return f"{intro}{body}{question}", (values[asked],)


def variable_tracking(rng: random.Random, units: int) -> tuple[str, tuple[str, ...]]:
    names: list[str] = []
    while len(names) < 5:
        name = "".join(rng.choice("ABCDEFGHIJKLMNOPQRSTUVWXYZ") for _ in range(5))
        if name not in names:
            names.append(name)
    value = str(rng.randint(10000, 99999))
    facts = [f"VAR {names[0]} = {value}. "] + [
        f"VAR {b} = VAR {a}. " for a, b in zip(names, names[1:], strict=False)
    ]
    body = "".join(_insert_at_depths([NOISE] * units, facts, rng))
    intro = "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n"
    question = (
        f"\nQuestion: Find all variables that are assigned the value {value} in the text above. "
        f"Answer: According to the chain(s) of variable assignment in the text above, {len(names)} "
        f"variables are assigned the value {value}, they are:"
    )
    return f"{intro}{body}{question}", tuple(names)


def common_words(rng: random.Random, units: int) -> tuple[str, tuple[str, ...]]:
    vocab: list[str] = []
    seen: set[str] = set()
    while len(vocab) < 10 + units:
        word = _pseudo_word(rng)
        if word not in seen:
            seen.add(word)
            vocab.append(word)
    common, rare = vocab[:10], vocab[10:]
    common_freq = max(3, min(30, units // 20))  # RULER's 30 at long lengths
    words = [w for w in common for _ in range(common_freq)]
    words += [w for w in rare for _ in range(rng.randint(1, min(3, common_freq - 1)))]
    rng.shuffle(words)
    listing = " ".join(f"{i + 1}. {w}" for i, w in enumerate(words))
    question = (
        "\nQuestion: What are the 10 most common words in the above list? "
        "Answer: The top 10 words that appear most often in the list are:"
    )
    return (
        f"Below is a numbered list of words. In these words, some appear more often than others. Memorize the ones that appear most often.\n{listing}{question}",
        tuple(common),
    )


@functools.lru_cache(maxsize=1)
def stdlib_sources() -> tuple[tuple[str, str], ...]:
    """(relative path, text) of the standard library's own .py files (not tests), sorted by path."""
    root = Path(sysconfig.get_paths()["stdlib"])
    out = []
    for path in sorted(root.rglob("*.py")):
        rel = path.relative_to(root).as_posix()
        if rel.startswith(("test/", "site-packages/", "idlelib/", "lib2to3/tests/")) or "/test" in rel:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        if 2000 <= len(text) <= 60000:
            out.append((rel, text))
    if not out:
        raise RuntimeError(f"no Python sources found under {root}: the code task needs the stdlib sources")
    return tuple(out)


def _single_line_defs(text: str) -> dict[str, str]:
    """Function name -> its defining line, for names defined exactly once on one line."""
    counts: dict[str, int] = {}
    lines: dict[str, str] = {}
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("def ") and "(" in stripped:
            name = stripped[4 : stripped.index("(")]
            counts[name] = counts.get(name, 0) + 1
            if stripped.endswith(":") and len(stripped) <= 100:
                lines[name] = stripped
    return {n: line for n, line in lines.items() if counts[n] == 1 and not n.startswith("__")}


def code(rng: random.Random, units: int) -> tuple[str, tuple[str, ...]]:
    """`units` lines of concatenated stdlib files; the asked function's `def` line is the answer."""
    files = list(stdlib_sources())
    rng.shuffle(files)
    lines: list[str] = []
    for rel, text in files:
        if len(lines) >= units:
            break
        file_lines = text.splitlines()
        # from its first definition on: a short length still holds functions, not only imports
        first = next((i for i, line in enumerate(file_lines) if line.startswith(("def ", "class "))), 0)
        lines.append(f"# ===== file: {rel} (from line {first + 1}) =====")
        lines.extend(file_lines[first:])
    body = "\n".join(lines[: max(units, 1)])
    defs = _single_line_defs(body)
    if not defs:  # too few lines yet (only while searching the length): nothing to ask
        return f"# Python source files\n{body}", ()
    name = rng.choice(sorted(defs))
    answer = defs[name].removesuffix(":")
    question = f"\n\n# Question: which line above defines the function `{name}`?\n# Answer: the line is\n"
    return f"# Python source files\n{body}{question}", (answer,)


Builder = Callable[[random.Random, int], tuple[str, tuple[str, ...]]]
TASKS: dict[str, tuple[Builder, int]] = {  # name -> (builder, max_tokens to generate)
    "passkey": (passkey, 12),
    "niah_multikey": (niah_multikey, 16),
    "variable_tracking": (variable_tracking, 32),
    "common_words": (common_words, 48),
    "code": (code, 40),
}


MAX_UNITS = 1 << 22


def _fit_units(build: Callable[[int], str], budget: int, count_tokens: CountTokens) -> int:
    """The most units whose prompt takes at most `budget` tokens (at least 1; MAX_UNITS when the
    filler runs out first)."""
    lo, hi = 1, 2
    while count_tokens(build(hi)) <= budget:
        if hi >= MAX_UNITS:
            return MAX_UNITS
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if count_tokens(build(mid)) <= budget:
            lo = mid
        else:
            hi = mid
    return lo


# Draws of one sample before giving up: a draw of the code task can have no question to ask (the
# text holds no function defined once on one line: seen at 8K with Python 3.12's stdlib).
MAX_DRAWS = 8


def _draw(
    task: str, target_tokens: int, index: int, rng_state: random.Random, count_tokens: CountTokens
) -> Sample | None:
    """The longest prompt of one draw that fits with the generated tokens, None when it asks
    nothing. Every build of the search restarts from the draw's random state."""
    builder, max_tokens = TASKS[task]
    budget = target_tokens - max_tokens
    state = rng_state.getstate()

    def build(units: int) -> tuple[str, tuple[str, ...]]:
        rng_state.setstate(state)
        return builder(rng_state, units)

    units = _fit_units(lambda u: build(u)[0], budget, count_tokens)
    prompt, answers = build(units)
    num_prompt_tokens = count_tokens(prompt)
    if not answers or num_prompt_tokens > budget:
        return None
    return Sample(task, target_tokens, index, prompt, answers, max_tokens, num_prompt_tokens)


def make_samples(
    task: str, target_tokens: int, num_samples: int, seed: int, count_tokens: CountTokens
) -> list[Sample]:
    """`num_samples` prompts of `task` whose prompt + generated tokens fit `target_tokens`."""
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}: choose from {', '.join(TASKS)}")
    samples = []
    for index in range(num_samples):
        for draw in range(MAX_DRAWS):
            sample = _draw(
                task, target_tokens, index, _rng(seed, task, target_tokens, index, draw), count_tokens
            )
            if sample is not None:
                samples.append(sample)
                break
        else:
            raise ValueError(
                f"{target_tokens} tokens are too few for the {task} task: ask for a longer length"
            )
    return samples


def _normalize(text: str) -> str:
    return " ".join(text.lower().split())


def score(output: str, answers: tuple[str, ...]) -> float:
    """Fraction of the answers contained in the output (case and whitespace normalized)."""
    if not answers:
        raise ValueError("a sample needs at least one answer")
    out = _normalize(output)
    return sum(_normalize(a) in out for a in answers) / len(answers)


def teacher_forced_text(target_tokens: int, seed: int, count_tokens: CountTokens) -> str:
    """Real text for teacher-forced agreement: stdlib sources from a seeded start, cut to length."""
    files = stdlib_sources()
    start = random.Random(seed).randrange(len(files))
    chunks: list[str] = []
    for i in range(len(files)):
        chunks.append(files[(start + i) % len(files)][1])
        if count_tokens("".join(chunks)) >= target_tokens:
            break
    text = "".join(chunks)
    lines = text.splitlines(keepends=True)
    return "".join(lines[: _fit_units(lambda k: "".join(lines[:k]), target_tokens, count_tokens)])
