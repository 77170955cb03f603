#!/usr/bin/env python3
"""scripts/fit_attention_profile.py recovers a known floor and efficiency from a profile in Vidur's
attention.csv format (seeded multiplicative noise of up to 5 %, prefill rows and rows without a
decode time mixed in), and rejects bad rows with FILE:LINE: field and a non-zero exit."""
import os
import random
import subprocess
import sys
import tempfile

SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts", "fit_attention_profile.py")
HEADER = ("time_stats.attn_decode.median,n_embd,n_q_head,n_kv_head,block_size,num_tensor_parallel_workers,"
          "max_model_len,batch_size,prefill_chunk_size,kv_cache_size,is_prefill,attention_backend\n")
FLOOR, ETA, BW = 20e-6, 0.7, 2.039e12


def profile(path, bad_line=None):
    rng = random.Random(20261126)
    with open(path, "w") as f:
        f.write(HEADER)
        for kv in (32, 256, 1024, 4032):
            for batch in (1, 7, 31, 128):
                for n_embd, nq, nkv, tp in ((8192, 64, 8, 2), (4096, 32, 32, 1)):
                    nbytes = batch * kv * 2 * (nkv / tp) * (n_embd // nq) * 2
                    ms = (FLOOR + nbytes / (ETA * BW)) * (1 + rng.uniform(-0.05, 0.05)) * 1e3
                    f.write(f"{ms:.6g},{n_embd},{nq},{nkv},16,{tp},4096,{batch},0,{kv},False,FA\n")
        f.write(",8192,64,8,16,2,4096,1,512,0,True,FA\n")      # a prefill row: skipped
        f.write(",8192,64,8,16,2,4096,3,0,64,False,FA\n")      # no decode time: skipped
        if bad_line:
            f.write(bad_line + "\n")


def run(path, *args):
    return subprocess.run([sys.executable, SCRIPT, path, "--min-mib", "0", *args], capture_output=True, text=True)


def main():
    failures = []
    with tempfile.TemporaryDirectory() as d:
        good = os.path.join(d, "attention.csv")
        profile(good)
        r = run(good)
        if r.returncode != 0:
            sys.exit(f"the fit failed: {r.stderr}")
        values = dict(line.split(" = ") for line in r.stdout.splitlines() if " = " in line)
        eta, floor = float(values["attention_bandwidth_efficiency"]), float(values["attention_layer_overhead_s"])
        if abs(eta - ETA) > 0.03:
            failures.append(f"eta {eta}, expected {ETA}")
        if abs(floor - FLOOR) > 3e-6:
            failures.append(f"floor {floor}, expected {FLOOR}")
        if "32 rows" not in r.stdout:
            failures.append(f"expected 32 decode rows fitted:\n{r.stdout}")
        bad = os.path.join(d, "bad.csv")
        profile(bad, "0.5,8192,64,8,16,2,4096,many,0,64,False,FA")
        r = run(bad)
        if r.returncode == 0 or f"{bad}:36: batch_size: 'many' is not a whole number" not in r.stderr:
            failures.append(f"a bad batch_size: rc {r.returncode}, stderr {r.stderr!r}")
        with open(bad, "w") as f:
            f.write("n_embd,batch_size\n4096,1\n")
        r = run(bad)
        if r.returncode == 0 or f"{bad}:1: n_q_head: column missing" not in r.stderr:
            failures.append(f"a missing column: rc {r.returncode}, stderr {r.stderr!r}")
        profile(bad, "0.5,8192,64,8")  # a short row
        r = run(bad)
        if r.returncode == 0 or f"{bad}:36: 4 fields where the header has 12" not in r.stderr:
            failures.append(f"a short row: rc {r.returncode}, stderr {r.stderr!r}")
        with open(bad, "w") as f:  # every row one size: no floor can be told from a bandwidth
            f.write(HEADER + "".join(f"{0.02 + i * 1e-4},4096,32,32,16,1,4096,4,0,512,False,FA\n" for i in range(5)))
        r = run(bad)
        if r.returncode == 0 or "cannot separate a floor from a bandwidth" not in r.stderr:
            failures.append(f"one size only: rc {r.returncode}, stdout {r.stdout!r}, stderr {r.stderr!r}")
        r = run(os.path.join(d, "absent.csv"))
        if r.returncode == 0 or "absent.csv: cannot read" not in r.stderr:
            failures.append(f"a missing file: rc {r.returncode}, stderr {r.stderr!r}")
    if failures:
        sys.exit("\n".join(failures))
    print(f"recovered eta {eta:.3f} (true {ETA}) and floor {floor * 1e6:.1f} us (true {FLOOR * 1e6:.0f})")


if __name__ == "__main__":
    main()
