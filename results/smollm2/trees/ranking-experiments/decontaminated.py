"""Write the answers of data/smollm2-regen/sharegpt-train-first-turn.jsonl that share no first prompt with the
validation or held-out slices and are in sharegpt:train-unique (2,592 of 2,689; see that folder's README).

    python decontaminated.py OUT.jsonl
"""
import json
import sys
from pathlib import Path

from dels_hub.sharegpt import sharegpt_split, unique_train

REGEN = Path(__file__).resolve().parents[4] / "data/smollm2-regen/sharegpt-train-first-turn.jsonl"


def first_prompt(record: dict) -> str | None:
    return next((turn.get("value", "").strip() for turn in record.get("conversations", [])
                 if turn.get("from") == "human"), None)


def main(out: str) -> None:
    train = sharegpt_split("train")
    unique = {record.get("id") for record in unique_train()}
    shared = {first_prompt(r) for r in sharegpt_split("heldout") + sharegpt_split("validation")} - {None, ""}
    lines = REGEN.read_text().split("\n")  # line i answers conversation i of sharegpt:train
    kept = 0
    with open(out, "w") as handle:
        for record, line in zip(train, lines):
            messages = json.loads(line).get("messages") if line.strip() else None
            if messages and record.get("id") in unique and first_prompt(record) not in shared:
                handle.write(line + "\n")
                kept += 1
    print(f"{out}: {kept} answers")


if __name__ == "__main__":
    main(sys.argv[1])
