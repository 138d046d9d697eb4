"""``tgb card NS``: the dataset card, generated from the manifest and the lineage index.

Tokens and documents per source, the realised mixture by step range,
packing efficiency, layout, schema and the data contract (tokenizer,
pipeline version, git SHA, as producers recorded them in the namespace's
metadata), and the excisions. ``--json`` prints it as JSON.
"""

from __future__ import annotations

import argparse
import time

from torch_tgb.cli._common import add_json_flag, add_storage_option_flag, format_table, print_json, storage_options

__all__ = ["add_parser", "run"]


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("card", help="the dataset card: sources, mixture, packing, contract, excisions",
                       description=__doc__.split("\n\n")[1] if __doc__ else None)
    p.add_argument("ns", metavar="NS", help="namespace URL or local directory")
    add_json_flag(p)
    add_storage_option_flag(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    from torch_tgb.lineage import dataset_card

    card = dataset_card(args.ns, storage_options=storage_options(args))
    if args.json:
        print_json(card)
        return 0
    m, p = card["manifest"], card["packing"]
    print(f"# {card['namespace']}")
    print(format_table([("steps", m["steps"]), ("sealed", m["sealed"]), ("manifest version", m["version"]),
                        ("producers", m["producers"]), ("rows", p["rows"]), ("tokens", p["tokens"]),
                        ("packing efficiency", "-" if p["efficiency"] is None else f"{p['efficiency']:.1%}")],
                       title="dataset"))
    if card["dataset"] is not None:
        d = card["dataset"]
        print(format_table([("layout", d["layout"]), ("fingerprint", d["fingerprint"][:16]),
                            *((k, v) for k, v in d["contract"].items())], title="contract"))
    print("sources")
    for s in card["sources"]:
        print(f"  {s['name']} ({s['kind']}, {s['units']} unit(s)): {s['documents']} documents, {s['tokens']} tokens "
              f"({s['share']:.1%})")
    print("mixture (share of tokens)")
    for r in card["mixture"]:
        shares = ", ".join(f"{n} {v:.1%}" for n, v in r["shares"].items()) or "-"
        print(f"  steps {r['steps'][0]}..{r['steps'][1] - 1}: {shares}")
    print(f"excisions: {len(card['excisions'])}")
    for e in card["excisions"]:
        when = time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(e["when"]))
        print(f"  version {e['version']} by {e['who']} at {when} UTC: {e['records']} record(s), {e['steps']} step(s), "
              f"{e['tokens']} tokens" + (f" ({e['reason']})" if e["reason"] else ""))
    lin = card["lineage"]
    print(f"lineage index: through version {lin['indexed_through']} of {lin['head']} "
          f"({lin['runs']} run(s), {lin['deltas']} delta(s))")
    return 0
