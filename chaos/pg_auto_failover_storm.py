"""Clients for chaos/pg_auto_failover.sh, and its report.

    pg_auto_failover_storm.py TOKEN KEYS CLIENTS HISTORY WINDOW   submit over WINDOW seconds
    pg_auto_failover_storm.py --report HISTORY FAULTS             what the clients saw

Each client takes keys from one queue and submits each with its Idempotency-Key to the three
nodes in turn, retrying after a 503 (waiting its Retry-After) or a refused connection, until
a 200 or 201; keys ending in 3 or 7 are submitted a second time on another node (a double
click). Every answer is one JSON line: t (seconds since the epoch), key, status, retry_after.
"""

import json
import sys
import threading
import time
import urllib.error
import urllib.request

NODES = ["http://127.0.0.1:17405", "http://127.0.0.1:17406", "http://127.0.0.1:17407"]


def submit(token, key, node, log, lock):
    body = json.dumps({"kind": "chat.completion", "params": {"prompt": f"{key} please"}})
    for attempt in range(400):
        url = NODES[(node + attempt) % len(NODES)] + "/v1/jobs"
        request = urllib.request.Request(
            url,
            data=body.encode(),
            method="POST",
            headers={
                "Authorization": f"Bearer {token}",
                "Idempotency-Key": key,
                "Content-Type": "application/json",
            },
        )
        status, retry_after = None, None
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                status = answer.status
        except urllib.error.HTTPError as error:
            status, retry_after = error.code, error.headers.get("Retry-After")
        except OSError:
            status = None
        with lock:
            log.write(json.dumps({"t": time.time(), "key": key, "status": status,
                                  "retry_after": retry_after}) + "\n")
        if status in (200, 201):
            return status
        if status == 503 and retry_after is None:
            raise SystemExit(f"{key}: a 503 without Retry-After")
        if status not in (None, 503):
            raise SystemExit(f"{key}: answered {status}")
        time.sleep(min(float(retry_after or 0.2), 1.0))
    raise SystemExit(f"{key}: never accepted")


def storm(token, keys, clients, history, window):
    queue = [f"paf:{i}" for i in range(keys)]
    lock = threading.Lock()
    pace = window * clients / keys
    failures = []
    with open(history, "w") as log:
        def client(c):
            try:
                while True:
                    with lock:
                        if not queue:
                            return
                        key = queue.pop()
                    submit(token, key, c, log, lock)
                    if key[-1] in "37":
                        submit(token, key, c + 1, log, lock)
                    time.sleep(pace)
            except SystemExit as error:
                failures.append(str(error))

        threads = [threading.Thread(target=client, args=(c,)) for c in range(clients)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    if failures:
        raise SystemExit("; ".join(failures))


def report(history, faults):
    marks = {}
    for line in open(faults):
        what, at = line.split()
        marks[what] = float(at)
    killed, promoted = marks["kill"], marks["promoted"]
    answers = [json.loads(line) for line in open(history)]
    accepted = {a["key"] for a in answers if a["status"] in (200, 201)}
    during = [a["status"] for a in answers if killed + 0.2 < a["t"] < promoted]
    first_201 = min((a["t"] for a in answers if a["status"] == 201 and a["t"] > promoted),
                    default=float("nan"))
    other = sorted({s for s in during if s not in (None, 200, 201, 503)})
    after = [a["status"] for a in answers if promoted < a["t"] < first_201]
    print(f"keys accepted: {len(accepted)}; answers: {len(answers)}")
    print(f"promoted -> first 201: {after.count(503)} x 503, {after.count(None)} refused, "
          f"other statuses: {sorted({s for s in after if s not in (None, 503)}) or 'none'}")
    print(f"during the switch: {during.count(503)} x 503, {during.count(None)} refused, "
          f"other statuses: {other or 'none'}")
    print(f"SIGKILL -> promoted {1000 * (promoted - killed):.0f} ms; "
          f"promoted -> first 201 {1000 * (first_201 - promoted):.0f} ms; "
          f"SIGKILL -> first 201 {1000 * (first_201 - killed):.0f} ms")


if __name__ == "__main__":
    if sys.argv[1] == "--report":
        report(sys.argv[2], sys.argv[3])
    else:
        storm(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], float(sys.argv[5]))
