"""What reading a spec costs, for the shapes of YAML that cost the most per character.

    python bench/spec_yaml_cost.py

For each shape, the text at 1/4, 1/2 and all of ``MAX_SPEC_CHARS``: seconds to read it with
``core.yaml_lines.load_with_lines`` and microseconds per character. Linear cost = a flat
per-character column (its ratio to the quarter size near 1.0); a shape that blows up (nested
aliases, deep nesting) is refused at once. Figures on a shared machine are noisy.
"""

from __future__ import annotations

import time

from qosched.core.errors import InputError
from qosched.core.yaml_lines import MAX_SPEC_CHARS, load_with_lines


def nested_lists(size: int) -> str:
    unit = "[" * 99 + "]" * 99  # the deepest allowed, repeated
    return "[" + ",".join([unit] * max(1, size // (len(unit) + 1) - 1)) + "]"


def flow_numbers(size: int) -> str:
    return "[" + ",".join(["1"] * (size // 2 - 1)) + "]"


def block_mapping(size: int) -> str:
    return "".join(f"k{i}: v\n" for i in range(size // 12))


def flow_mappings(size: int) -> str:
    return "{" + ",".join(f"k{i}: {{a: [1]}}" for i in range(size // 20)) + "}"


def laughs(size: int) -> str:
    """The same 342 bytes at every size: 9**9 strings once aliases are followed."""
    lines = ['a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    pairs = zip("abcdefgh", "bcdefghi", strict=True)
    lines += [f"{b}: &{b} [{','.join([f'*{a}'] * 9)}]" for a, b in pairs]
    return "\n".join(lines) + "\n"


SHAPES = {
    "nested lists": nested_lists,
    "flow numbers": flow_numbers,
    "block mapping": block_mapping,
    "flow mappings": flow_mappings,
    "nested aliases": laughs,
}


def read_seconds(text: str) -> tuple[float, str]:
    start = time.perf_counter()
    try:
        load_with_lines(text, "bench.yaml")
        outcome = "read"
    except InputError:
        outcome = "refused"
    return time.perf_counter() - start, outcome


def main() -> None:
    print(f"{'shape':15s} {'chars':>8s} {'outcome':>8s} {'s':>7s} {'us/char':>8s} {'ratio':>6s}")
    for name, build in SHAPES.items():
        base = None
        for fraction in (4, 2, 1):
            text = build(MAX_SPEC_CHARS // fraction)
            seconds, outcome = read_seconds(text)
            per_char = 1e6 * seconds / len(text)
            base = base or per_char
            print(
                f"{name:15s} {len(text):8d} {outcome:>8s} {seconds:7.3f} {per_char:8.2f} "
                f"{per_char / base:6.2f}"
            )


if __name__ == "__main__":
    main()
