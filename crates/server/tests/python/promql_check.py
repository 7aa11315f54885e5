"""Runs every PromQL expression of a Grafana dashboard against a Prometheus server until each
returns data (or the deadline passes). Usage: python3 promql_check.py DASHBOARD.json PORT SECONDS"""

import json
import sys
import time
import urllib.parse
import urllib.request

dashboard, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
expressions = [t["expr"] for p in json.load(open(dashboard))["panels"] for t in p["targets"]]
deadline = time.time() + seconds
waiting = list(expressions)
last = {}
while waiting and time.time() < deadline:
    for expr in list(waiting):
        url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
        try:
            answer = json.load(urllib.request.urlopen(url, timeout=5))
        except OSError as error:
            last[expr] = str(error)
            continue
        last[expr] = answer
        if answer.get("status") == "success" and answer["data"]["result"]:
            print("data:", expr, answer["data"]["result"][0]["value"])
            waiting.remove(expr)
    time.sleep(1)
for expr in waiting:
    print("NO DATA:", expr, last.get(expr), file=sys.stderr)
print(f"{len(expressions) - len(waiting)} of {len(expressions)} expressions returned data")
sys.exit(1 if waiting else 0)
