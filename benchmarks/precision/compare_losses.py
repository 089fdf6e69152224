#!/usr/bin/env python3
"""#26's per-step comparison of two runs' losses: the relative difference |ours - theirs| / theirs at
every step after step 20, printed as median, largest (and its step) and the number of steps over 2%.
Either file may be trident's metrics (JSON lines with "step" and "loss") or the PyTorch reference's
--json output ({"steps": [...]}). Exits 1 when the largest difference passes 2%, 2 on unusable input.
  compare_losses.py OURS THEIRS [OUR_NAME THEIR_NAME]
"""
import json
import statistics
import sys

LIMIT = 0.02
FIRST_COMPARED = 21


def losses(path):
    with open(path) as f:
        text = f.read()
    try:
        return {r["step"]: r["loss"] for r in json.loads(text)["steps"]}
    except (ValueError, TypeError, KeyError):
        return {r["step"]: r["loss"] for r in map(json.loads, text.splitlines()) if "loss" in r}


def compare(ours, theirs, our_name, their_name):
    """Prints the comparison; returns the largest relative difference after step 20."""
    if set(ours) != set(theirs):
        sys.exit(f"the runs logged different steps: {len(ours)} against {len(theirs)} ({our_name}, {their_name})")
    diffs = {s: abs(ours[s] - theirs[s]) / theirs[s] for s in ours}
    late = [s for s in diffs if s >= FIRST_COMPARED]
    if not late:
        sys.exit(f"{len(diffs)} steps: nothing after step 20 to compare (step-1 difference {diffs[1]:.2e})")
    worst = max(late, key=diffs.get)
    last = max(ours)
    print(f"steps {last}: loss {theirs[1]:.4f} -> {our_name} {ours[last]:.4f}, {their_name} {theirs[last]:.4f}; "
          f"step-1 difference {diffs[1]:.2e}; after step 20: median {statistics.median(diffs[s] for s in late):.2e}, "
          f"largest {diffs[worst]:.2e} at step {worst}, {sum(diffs[s] > LIMIT for s in late)} steps over {LIMIT:.0e}")
    return diffs[worst]


if __name__ == "__main__":
    if len(sys.argv) not in (3, 5):
        sys.exit(__doc__)
    names = sys.argv[3:5] or ["ours", "theirs"]
    try:
        ours, theirs = losses(sys.argv[1]), losses(sys.argv[2])
    except (OSError, ValueError, KeyError) as e:
        print(f"compare_losses.py: {e}", file=sys.stderr)
        sys.exit(2)
    sys.exit(0 if compare(ours, theirs, *names) <= LIMIT else 1)
