"""tensorboard_check.py DIR METRICS.jsonl: the event files cltrain wrote
into DIR, read by TensorBoard's own reader (which checks every record's
CRC-32C), hold every scalar of the JSON Lines metrics at the same steps,
equal as float32."""
import json
import math
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator

tb_dir, metrics = sys.argv[1], sys.argv[2]
acc = event_accumulator.EventAccumulator(tb_dir, size_guidance={event_accumulator.SCALARS: 0})
acc.Reload()
tags = set(acc.Tags()["scalars"])
print("tags:", sorted(tags))


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


checked = 0
for line in open(metrics):
    m = json.loads(line)
    prefix = "" if m["event"] == "step" else "epoch/"
    fields = ["loss", "accuracy", "test_loss", "test_accuracy"]
    if m["event"] == "step":
        fields += ["lr", "samples_per_s", "grad_norm", "comm_s", "comm_hidden", "loss_scale", "skipped",
                   "prefetch_wait_s"]
    for f in fields:
        v = m.get(f)
        if v is None or (isinstance(v, float) and not math.isfinite(v)):
            continue
        tag = prefix + f
        assert tag in tags, f"{tag} missing (have {sorted(tags)})"
        got = {e.step: e.value for e in acc.Scalars(tag)}
        assert m["step"] in got, f"{tag} has no value at step {m['step']}"
        assert got[m["step"]] == f32(v), f"{tag} at step {m['step']}: {got[m['step']]} != {v}"
        checked += 1
    if m["event"] == "step":
        for r, share in enumerate(m["shares"]):
            got = {e.step: e.value for e in acc.Scalars(f"replica{r}/share")}
            assert got[m["step"]] == share
            checked += 1
    # each replica's achieved FLOP/s and MFU, in step and epoch records alike
    for key in ("flops", "mfu"):
        for r, v in enumerate(m.get(key) or []):
            if v is None:
                continue
            got = {e.step: e.value for e in acc.Scalars(f"{prefix}replica{r}/{key}")}
            assert got[m["step"]] == f32(v), f"{prefix}replica{r}/{key} at step {m['step']}: {got[m['step']]} != {v}"
            checked += 1
for tag in ("replica0/flops", "replica1/mfu", "epoch/replica0/mfu", "prefetch_wait_s"):
    assert tag in tags, f"{tag} missing (have {sorted(tags)})"
assert checked > 20, f"only {checked} values checked"
print(f"tensorboard_check: {checked} values equal to the metrics file")
