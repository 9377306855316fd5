"""bench.decode_timeline reads stamps only a GPU writes: its reading of a stamp buffer, its rows and its report are
exercised here on a buffer of the same layout, and the stamped source beside the plain one."""

import numpy as np
import pytest

from bench import decode_timeline
from examples.decode import kernels
from examples.decode.model import Config

# Two steps of one layer after `start`, then the third step's first kernel: (kernel, entry, waited, exit) in ns.
STEP = [("embed_qkv_rope", 0, 600, 1000), ("attention", 500, 1800, 2300), ("attn_out", 1400, 2900, 4000),
        ("ffn_in", 2500, 4500, 5000), ("ffn_out", 3400, 5600, 6100), ("logits_argmax", 4300, 6700, 9000)]


def stamp_words() -> np.ndarray:
    records = [("start", 0, 0, 400)]
    for step in range(2):
        records += [(name, t0 + 10000 * step + 1000, t1 + 10000 * step + 1000, t2 + 10000 * step + 1000)
                    for name, t0, t1, t2 in STEP]
    records.append(("embed_qkv_rope", 20500, 21600, 22000))
    index = {export.name: i for i, export in enumerate(kernels.EXPORTS)}
    words = np.zeros(kernels.STAMP_HEADER_WORDS + 4 * len(records), np.uint64)
    words[0] = len(records)
    words[kernels.STAMP_HEADER_WORDS:] = np.array([(index[n], a, b, c) for n, a, b, c in records]).ravel()
    return words


def test_the_rows_give_each_kernel_its_cost_on_the_chain():
    found = decode_timeline.instances(stamp_words())
    assert list(found["kernel"][:3]) == ["start", "embed_qkv_rope", "attention"]
    rows = {r["kernel"]: r for r in decode_timeline.chain_rows(found)}
    assert set(rows) == {"embed_qkv_rope", "attention", "attn_out", "ffn_in", "ffn_out", "logits_argmax"}
    assert rows["embed_qkv_rope"]["instances"] == 2
    assert rows["attention"]["chain_us"] == pytest.approx(1.1)  # its wait (1800) to attn_out's (2900)
    assert rows["attention"]["entry_us"] == pytest.approx(-0.1)  # entered 100 ns before embed_qkv_rope's wait returned
    assert rows["attention"]["waiting_us"] == pytest.approx(1.3) and rows["attention"]["work_us"] == pytest.approx(0.5)
    assert rows["logits_argmax"]["chain_us"] == pytest.approx(3.9)  # to the next step's first kernel's wait
    assert decode_timeline.tokens_us(found) == pytest.approx(10.0)


def test_the_pair_rows_split_a_kernels_cost_by_the_kernel_after_it():
    pairs = {(r["kernel"], r["next"]): r for r in decode_timeline.pair_rows(decode_timeline.instances(stamp_words()))}
    assert set(pairs) == {(a, b) for (a, *_), (b, *_) in zip(STEP, STEP[1:] + STEP[:1])}
    logits = pairs["logits_argmax", "embed_qkv_rope"]
    assert logits["instances"] == 2 and logits["chain_us"] == pytest.approx(3.9)
    assert logits["work_us"] == pytest.approx(2.3)
    assert logits["next_waiting_us"] == pytest.approx(0.85)  # the next step's embed_qkv_rope: 600 ns, then 1100


def test_the_report_prints_each_run_beside_the_decode_without_stamps():
    found = decode_timeline.instances(stamp_words())
    run = dict(device="a GPU", early_launch=True, match=True, stamped_us=29.5, plain_us=29.3,
               token_us=decode_timeline.tokens_us(found), records=len(found["kernel"]),
               rows=decode_timeline.chain_rows(found), pairs=decode_timeline.pair_rows(found))
    text = decode_timeline.report(dict(steps=2, config="Config()", runs={"early launch": run}))
    assert "### early launch (supports_early_launch: True): 10.00 µs a token from the stamps" in text
    assert "29.50 with stamps, 29.30 without" in text
    assert "| attention | 2 | 1.10 | -0.10 | 1.30 | 0.50 |" in text
    assert "| attention | attn_out | 2 | 1.10 | 0.50 | 1.50 |" in text


def test_stamps_reach_the_cuda_kernels_alone():
    c = Config()
    plain, stamped = kernels.source(c), kernels.source(c, stamps=0x7000)
    assert stamped is not plain and stamped.key != plain.key
    assert "#define STAMPS 28672ull" in stamped.payload["cuda"].payload
    assert "#define KIND_LOGITS_ARGMAX 7u" in stamped.payload["cuda"].payload
    assert "#define STAMPS" not in plain.payload["cuda"].payload
    assert stamped.payload["vulkan"].payload == plain.payload["vulkan"].payload
