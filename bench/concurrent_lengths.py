#!/usr/bin/env python3
"""Concurrent clients at random sequence lengths against one kilnd model (a benchmark).

  bench/concurrent_lengths.py URL CLIENTS REQUESTS_PER_CLIENT [MAX_LEN]

URL is a KServe v2 infer endpoint (http://127.0.0.1:PORT/v2/models/NAME/infer) of a text model
with inputs input_ids and attention_mask [1, L]; each client sends REQUESTS_PER_CLIENT
requests one after another, L uniform in 1..MAX_LEN (default 256, seeded per client), binary
outputs. Prints requests/s, p50/p99/max latency. Run it against the same model with
`shape_classes: auto` and `off` to see what shape classes buy (bench/results/random_lengths.md).
"""
import json
import random
import sys
import threading
import time
import urllib.request


def main():
    url, clients, per = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    max_len = int(sys.argv[4]) if len(sys.argv) > 4 else 256
    lat, lock = [], threading.Lock()

    def client(seed):
        rng = random.Random(seed)
        for _ in range(per):
            n = rng.randint(1, max_len)
            body = {"inputs": [
                {"name": "input_ids", "shape": [1, n], "datatype": "INT64",
                 "data": [rng.randint(0, 999) for _ in range(n)]},
                {"name": "attention_mask", "shape": [1, n], "datatype": "INT64", "data": [1] * n}],
                "parameters": {"binary_data_output": True}}
            req = urllib.request.Request(url, json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
            t = time.time()
            urllib.request.urlopen(req).read()
            with lock:
                lat.append((time.time() - t) * 1e3)

    t0 = time.time()
    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.time() - t0
    lat.sort()
    print(f"{clients} clients x {per}: {len(lat) / elapsed:.1f} req/s, p50 {lat[len(lat) // 2]:.1f} ms, "
          f"p99 {lat[int(len(lat) * 0.99)]:.1f} ms, max {lat[-1]:.0f} ms")


if __name__ == "__main__":
    main()
