#!/usr/bin/env python3
"""The operator's live heap by what holds it, from a heaptrack profile.

    heaptrack_print -f nimbus.zst --print-flamegraph leaked.txt --flamegraph-cost-type leaked
    rustfilt < leaked.txt > leaked-demangled.txt   # cargo install rustfilt
    python3 hack/heap-split.py leaked-demangled.txt

Each allocation still live at the end is filed by its call stack (first match below). The
reflector's own allocations (its keys, hash slots and the Arc holding each cached object) are
generic code whose stack does not name the cache: they are one line. docs/src/benchmarks.md
("Where the heap goes") shows a run.
"""
import collections
import re
import sys

CATEGORIES = [
    ("DynamicObjects' fields, cached (our policy reports among them)", lambda s: "clone@dynamic.rs" in s and "apply_watcher_event" in s),
    ("NimbusPolicies' fields, cached", lambda s: "clone@policy.rs" in s and "apply_watcher_event" in s),
    ("pods, in the posture's own store", lambda s: "pod_store.rs" in s),
    ("pods' fields, cached (PodFacts)", lambda s: "pods.rs" in s and ("apply_watcher_event" in s or "deserialize" in s)),
    ("ReplicaSets' and Jobs' metadata, cached", lambda s: "metadata.rs" in s and "apply_watcher_event" in s),
    ("cache indexes (pods by namespace, natives by owner)", lambda s: "set@cache.rs" in s or ("touched" in s and "cache.rs" in s and "notes.rs" not in s)),
    ("posture store: JSON and Table rows", lambda s: "of<>@store.rs" in s or "of<>@table.rs" in s),
    ("posture store: objects, versions, watch history", lambda s: "replace_within" in s),
    ("namespace postures: compliance coverage", lambda s: "namespace_posture" in s and "coverage@coverage.rs" in s),
    ("workload and namespace postures, the rest", lambda s: "workload_posture" in s or "namespace_posture" in s or "judge@posture.rs" in s),
    ("policy coverage, kept between computations", lambda s: "coverage.rs" in s),
    ("desired policy reports, kept between computations", lambda s: "workload_report" in s or "keep_reports" in s),
    ("previews", lambda s: "preview" in s),
    ("reflector stores' own allocations (keys, hash slots, each object's Arc; every cache)", lambda s: "apply_watcher_event" in s or "reflect.rs" in s),
    ("channels (cache subscriptions, broadcasts)", lambda s: any(f in s for f in ("chan.rs", "list.rs", "broadcast.rs", "block.rs"))),
    ("HTTP and TLS buffers, connections", lambda s: any(f in s for f in ("io.rs", "bytes_mut", "hyper", "rustls", "framed"))),
]
FRAME = re.compile(r"([^;]*?) \(([^)]*)\)(?:;|$)")


def main(path):
    totals = collections.Counter()
    for line in open(path):
        stack, _, cost = line.rstrip("\n").rpartition(" ")
        if not cost.isdigit():
            continue
        frames = " < ".join(f"{m.group(1)[:60]}@{m.group(2)}" for m in FRAME.finditer(stack))
        name = next((n for n, matches in CATEGORIES if matches(frames)), "the rest (runtime, controllers, metrics...)")
        totals[name] += int(cost)
    live = sum(totals.values())
    print(f"live heap {live / 2**20:.1f} MiB")
    for name, cost in totals.most_common():
        print(f"{cost / 2**20:6.1f} MiB  {100 * cost / live:4.1f}%  {name}")


if __name__ == "__main__":
    main(sys.argv[1])
