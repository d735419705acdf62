"""Reads `cargo test --no-run --message-format=json` on stdin and prints
"name<TAB>path" for each test executable (target kind "test") whose name is
among the arguments: how the device scripts find what cargo built."""
import json
import sys

want = set(sys.argv[1:])
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    t = m.get("target", {})
    if m.get("reason") == "compiler-artifact" and m.get("executable") and t.get("name") in want \
            and "test" in t.get("kind", []):
        print(t["name"] + "\t" + m["executable"])
