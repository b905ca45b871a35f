#!/usr/bin/env python3
"""Readable views of onejob's JSON answers for scripts/real-provider.sh (stdin -> stdout).

  show.py job          GET /v1/jobs/{id}            -> one line: state, attempts, result/error
  show.py attempts     GET /v1/jobs/{id}/attempts   -> one line per attempt
  show.py events       GET /v1/jobs/{id}/events     -> one line per event
  show.py certs        GET /v1/certificates         -> one line per verify run
  show.py cases ID     GET /v1/certificates         -> the cases of run ID, with the outputs
  show.py runs         GET /v1/certificates         -> every run, oldest first, each with its cases
  show.py run ID       GET /v1/certificates         -> "passed=.. valid=.. temperature=.. ..." of run ID
  show.py valid P K    GET /v1/certificates         -> the run certifying provider P for kind K now ("" if none)
  show.py gaps         GET /v1/jobs/{id}/attempts   -> "#1->#2 212 ms, #2->#3 405 ms": waits between attempts
  show.py max-gap-ms   GET /v1/jobs/{id}/attempts   -> the longest of those waits in ms (0 if none)
  show.py get POINTER  any JSON                     -> the value at a JSON pointer ("" if absent)
  show.py summary-attempts  GET .../attempts        -> "failing-fake:failed,gemma:succeeded"
  show.py summary-events    GET .../events          -> "created,attempt_started,..."
"""

import json
import sys
from datetime import datetime


def parse_time(text):
    if not text:
        return None
    text = text.replace("Z", "+00:00")
    # Python 3.11 accepts at most 6 fractional digits.
    if "." in text:
        head, rest = text.split(".", 1)
        digits = "".join(c for c in rest if c.isdigit())
        tz = rest[len(digits):]
        text = f"{head}.{digits[:6].ljust(6, '0')}{tz}"
    return datetime.fromisoformat(text)


def clock(text):
    t = parse_time(text)
    return t.strftime("%H:%M:%S.%f")[:-3] if t else "-"


def ms_between(a, b):
    ta, tb = parse_time(a), parse_time(b)
    if not ta or not tb:
        return "-"
    return f"{(tb - ta).total_seconds() * 1000:.0f} ms"


def short(value, width=150):
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def job(doc):
    line = f"state={doc.get('state')} attempts={doc.get('attempts')}"
    if "result" in doc:
        line += f" result={json.dumps(doc['result'], ensure_ascii=False)}"
    if "error" in doc:
        line += f" error={short(doc['error'], 200)}"
    if "completed_by" in doc:
        line += f" completed_by={doc['completed_by']}"
    print(line)


def attempts(doc):
    for a in doc.get("attempts", []):
        took = ms_between(a.get("started_at"), a.get("finished_at"))
        line = (
            f"  #{a.get('number')} {a.get('provider'):<13} {a.get('state'):<10}"
            f" started {clock(a.get('started_at'))}  took {took:>8}"
        )
        error = a.get("error")
        if error:
            message = (
                error.get("message") or error.get("reason") or error
                if isinstance(error, dict)
                else error
            )
            line += f"  error: {short(message, 110)}"
        print(line)


def event_detail(e):
    d = e.get("detail") or {}
    kind = e.get("kind")
    if kind == "attempt_started":
        return f"#{d.get('number')} on {d.get('provider')}" + (" (hedge)" if d.get("hedge") else "")
    if kind == "attempt_resolved":
        error = d.get("error") or {}
        message = error.get("message") if isinstance(error, dict) else error
        return f"{d.get('outcome')}" + (f": {short(message, 100)}" if message else "")
    if kind == "failover":
        return f"{d.get('from')} -> {d.get('to')}"
    if kind == "failover_refused":
        return (
            f"{d.get('provider')} refused for {d.get('for')}, instead {d.get('instead')}: "
            f"{short(d.get('reason', ''), 90)}"
        )
    if kind == "won":
        return f"result {d.get('size')} bytes"
    if kind == "created":
        return f"fingerprint {str(d.get('fingerprint', ''))[:16]}…"
    return short(d, 120)


def events(doc):
    for e in doc.get("events", []):
        print(f"  {e.get('id'):>3} {clock(e.get('at'))}  {e.get('kind'):<17} {event_detail(e)}")


def certs(doc):
    for c in sorted(doc.get("certificates", []), key=lambda c: c.get("created_at", "")):
        verdict = "passed" if c.get("passed") else "FAILED"
        valid = "valid now" if c.get("valid") else "not valid"
        print(
            f"  {clock(c.get('created_at'))}  {c.get('provider'):<13} {c.get('kind')}  "
            f"{verdict:<6}  ({valid})  run {c.get('id')}"
        )


def cases(doc, run_id):
    for c in doc.get("certificates", []):
        if c.get("id") != run_id:
            continue
        for case in (c.get("report") or {}).get("cases", []):
            verdict = "pass" if case.get("passed") else "FAIL"
            output = json.dumps(case["output"], ensure_ascii=False) if "output" in case else "-"
            print(
                f"  {verdict}  {case.get('name'):<20} {case.get('latency_ms'):>5} ms  "
                f"{case.get('prompt_tokens', '?')} prompt tokens  output: {output}"
            )
            for problem in case.get("problems", []):
                print(f"          - {short(problem, 160)}")
        return
    print(f"  (run {run_id} not found)")


def runs(doc):
    ordered = sorted(doc.get("certificates", []), key=lambda c: c.get("created_at", ""))
    for c in ordered:
        certs({"certificates": [c]})
        for case in (c.get("report") or {}).get("cases", []):
            verdict = "pass" if case.get("passed") else "FAIL"
            if "output" in case:
                what = json.dumps(case["output"], ensure_ascii=False)
            else:
                what = short("; ".join(case.get("problems", [])), 70)
            print(f"      {verdict} {case.get('name'):<18} {case.get('latency_ms'):>5} ms  {what}")


def run(doc, run_id):
    for c in doc.get("certificates", []):
        if c.get("id") != run_id:
            continue
        report = c.get("report") or {}
        limits = report.get("limits") or {}
        print(
            f"passed={str(c.get('passed')).lower()} valid={str(c.get('valid')).lower()}"
            f" temperature={report.get('temperature')}"
            f" context_limit={limits.get('context_limit', '-')}"
            f" max_tokens={limits.get('max_tokens', '-')}"
        )
        return
    print("")


def valid(doc, provider, kind):
    ids = [
        c.get("id")
        for c in doc.get("certificates", [])
        if c.get("valid") and c.get("provider") == provider and c.get("kind") == kind
    ]
    print(",".join(ids))


def gap_list(doc):
    items = sorted(doc.get("attempts", []), key=lambda a: a.get("number", 0))
    gaps = []
    for a, b in zip(items, items[1:]):
        ta, tb = parse_time(a.get("finished_at")), parse_time(b.get("started_at"))
        if ta and tb:
            gaps.append((a.get("number"), b.get("number"), (tb - ta).total_seconds() * 1000))
    return gaps


def get(doc, pointer):
    value = doc
    for part in [p for p in pointer.split("/") if p != ""]:
        part = part.replace("~1", "/").replace("~0", "~")
        if isinstance(value, list):
            value = value[int(part)] if part.isdigit() and int(part) < len(value) else None
        elif isinstance(value, dict):
            value = value.get(part)
        else:
            value = None
        if value is None:
            break
    if value is None:
        print("")
    elif isinstance(value, str):
        print(value)
    else:
        print(json.dumps(value, ensure_ascii=False))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    command = sys.argv[1]
    doc = json.load(sys.stdin)
    if command == "job":
        job(doc)
    elif command == "attempts":
        attempts(doc)
    elif command == "events":
        events(doc)
    elif command == "certs":
        certs(doc)
    elif command == "cases":
        cases(doc, sys.argv[2])
    elif command == "runs":
        runs(doc)
    elif command == "run":
        run(doc, sys.argv[2])
    elif command == "valid":
        valid(doc, sys.argv[2], sys.argv[3])
    elif command == "gaps":
        print(", ".join(f"#{a}->#{b} {ms:.0f} ms" for a, b, ms in gap_list(doc)) or "-")
    elif command == "max-gap-ms":
        print(f"{max((ms for _, _, ms in gap_list(doc)), default=0):.0f}")
    elif command == "get":
        get(doc, sys.argv[2] if len(sys.argv) > 2 else "")
    elif command == "summary-attempts":
        print(",".join(f"{a['provider']}:{a['state']}" for a in doc.get("attempts", [])))
    elif command == "summary-events":
        print(",".join(e["kind"] for e in doc.get("events", [])))
    else:
        sys.exit(f"unknown view {command!r}\n{__doc__}")


if __name__ == "__main__":
    main()
