"""fp8_tiles' grouped sections ("grouped", "grouped_w8a16"): parsed as the dense ones, used by choose_tiles
for the grouped GEMMs at decode's rows per expert, and nowhere else (the rules keep their precedence; a table
without them changes nothing)."""
from __future__ import annotations

import pytest

from dcpctl.runtime.kernels.fp8_tiles import (DEFAULT_GEMV, DEFAULT_TILES, GROUPED_GEMV_PER_EXPERT,
                                              M_TILE_ROWS, PREFILL_GROUPED_A16_TILES,
                                              PREFILL_GROUPED_A8_TILES as A8, Fp8Tables, Tiles,
                                              choose_tiles, parse, tables_for)

UP, DOWN = (4096, 7168), (7168, 2048)    # V3's routed experts: gate+up, down (down is also o_proj/tp8's
                                         # shape)
SWAP, WIDE, FOLD = Tiles(swap=True), Tiles(bn=128, per_sm=4, max_split=4), Tiles(bn=32, stages=4, fold=True)
DATA = {"grouped": {"4096,7168": [[8, {"swap": True}], [32, {"bn": 128, "per_sm": 4, "max_split": 4}]],
                    "7168,2048": [[16, {"swap": True}]]},
        "grouped_w8a16": {"4096,7168": [[24, {"bn": 32, "stages": 4, "fold": True}], [M_TILE_ROWS, {}]]}}


def test_grouped_sections_parse_as_the_dense_ones():
    t = parse(DATA, "t")
    assert t.grouped == {UP: ((8, SWAP), (32, WIDE)), DOWN: ((16, SWAP),)}
    assert t.grouped_a16 == {UP: ((24, FOLD), (M_TILE_ROWS, DEFAULT_TILES))}
    assert (t.dense, t.dense_a16, t.gemv, t.how) == ({}, {}, {}, "t")
    assert parse({"dense": DATA["grouped"]}, "t").dense == t.grouped    # one section's data, either name
    assert parse({}, "t") == Fp8Tables(how="t")


@pytest.mark.parametrize("bad", [{"7168,2048": [[16, {"bk": 64}]]},     # no such Tiles field
                                 {"7168;2048": [[16, {}]]},              # the key is "N,K"
                                 {"7168,2048": [["many", {}]]},          # the bound is a row count
                                 {"7168,2048": [[16]]}])                 # an entry is [bound, fields]
def test_grouped_sections_refuse_what_the_dense_ones_refuse(bad):
    errors = []
    for section in ("dense", "dense_w8a16", "grouped", "grouped_w8a16"):
        with pytest.raises((TypeError, ValueError)) as e:
            parse({section: bad}, "t")
        errors.append((e.type, str(e.value)))
    assert len(set(errors)) == 1, errors


def test_grouped_gemms_take_the_table_by_rows_per_expert():
    t = parse(DATA, "t")
    pick = lambda rows, shape=UP, a16=False, E=16: choose_tiles(*shape, rows, E, a16, rows * E, tables=t)  # noqa: E731
    # w8a8: "grouped", the first bound covering the rows per expert; past the last bound DEFAULT_TILES
    assert ([pick(r) for r in (1, 8, 9, 20, 32, 33, M_TILE_ROWS)]
            == [SWAP, SWAP, WIDE, WIDE, WIDE] + [DEFAULT_TILES] * 2)
    assert [pick(r, DOWN) for r in (16, 17)] == [SWAP, DEFAULT_TILES]
    assert pick(8, (1536, 7168)) == DEFAULT_TILES                               # a shape the table lacks
    # w8a16: its own section where it has the shape, else "grouped"
    assert [pick(r, a16=True) for r in (3, 24, 25, M_TILE_ROWS)] == [FOLD, FOLD, DEFAULT_TILES, DEFAULT_TILES]
    assert pick(16, DOWN, a16=True) == SWAP
    # above M_TILE_ROWS rows per expert (prefill): w8a8 reads bounds there too (fp8_methods.py writes them),
    # w8a16 keeps its rule
    many = parse({"grouped": {"4096,7168": [[4 * M_TILE_ROWS, {"swap": True}]]}}, "t")
    assert choose_tiles(*UP, M_TILE_ROWS + 1, 16, False, 16 * 65, tables=many) == SWAP
    assert choose_tiles(*UP, 4 * M_TILE_ROWS + 1, 16, False, 16 * 300, tables=many) == A8
    assert choose_tiles(*UP, M_TILE_ROWS + 1, 16, False, 16 * 65, tables=Fp8Tables()) == A8
    assert choose_tiles(*UP, M_TILE_ROWS + 1, 16, True, 16 * 65, tables=many) == PREFILL_GROUPED_A16_TILES
    assert choose_tiles(*UP, M_TILE_ROWS, 16, False, 16 * 64, tables=many) == SWAP


def test_the_few_rows_rule_and_dense_gemms_keep_precedence_over_the_grouped_sections():
    t = parse(DATA, "t")
    # w8a16 at up to GROUPED_GEMV_PER_EXPERT rows per expert: the few-rows kernel, though "grouped_w8a16" has
    # a bound
    rows = GROUPED_GEMV_PER_EXPERT
    assert choose_tiles(*UP, rows, 16, True, 16 * rows, tables=t) == DEFAULT_GEMV
    assert choose_tiles(*UP, rows, 16, False, 16 * rows, tables=t) == SWAP      # w8a8: no few-rows rule
    # a dense GEMM of the shape reads the dense sections only (o_proj/tp8 has the routed down projection's
    # shape)
    assert choose_tiles(*DOWN, 16, tables=t) == DEFAULT_TILES
    assert choose_tiles(*DOWN, 1, tables=t) == DEFAULT_GEMV
    dense = parse({"dense": {"7168,2048": [[64, {"stages": 5}]]}}, "t")
    assert choose_tiles(*DOWN, 16, 16, False, 256, tables=dense) == DEFAULT_TILES


def test_the_shipped_table_tunes_only_w8a16_grouped_gemms_at_decode_rows():
    # the H200 table's grouped section (benchmarks/fp8_gemm.py --grouped --sweep, w8a16): w8a8 and prefill
    # rows keep the rules' choice, and a decode row count past the few-rows rule takes a setting of the
    # section
    h200, none = tables_for("NVIDIA H200", 90), Fp8Tables()
    assert h200.grouped == {} and set(h200.grouped_a16) <= {UP, DOWN} and h200.grouped_a16
    tuned = 0
    for shape in (UP, DOWN):
        for E in (16, 256):
            for rows in (1, 2, 3, 8, 20, 32, M_TILE_ROWS, M_TILE_ROWS + 1, 300):
                for a16 in (False, True):
                    got = choose_tiles(*shape, rows, E, a16, rows * E, tables=h200)
                    rule = choose_tiles(*shape, rows, E, a16, rows * E, tables=none)
                    if not a16 or rows > M_TILE_ROWS or rule == DEFAULT_GEMV or shape not in h200.grouped_a16:
                        # (the H200 table has no w8a8 grouped section: w8a8 keeps the rules at every row)
                        assert got == rule
                    else:
                        bounds = h200.grouped_a16[shape]
                        want = next((t for most, t in bounds if rows <= most), rule)
                        assert got == want
                        tuned += got != rule
    assert tuned > 0


METHODS = {"methods": {"dense": {"7168,2048": [[8, "w8a16"], [64, "w8a8"], [1 << 30, "cublas"]]},
                       "grouped": {"4096,7168": [[64, "w8a16"], [128, "w8a8"], [1 << 30, "per_expert"]]}}}


def test_methods_section_parses_and_refuses_unknown_methods():
    t = parse(METHODS, "t")
    assert t.methods == {DOWN: ((8, "w8a16"), (64, "w8a8"), (1 << 30, "cublas"))}
    assert t.grouped_methods[UP][-1] == (1 << 30, "per_expert")
    with pytest.raises(ValueError, match="method.*fp16"):
        parse({"methods": {"dense": {"7168,2048": [[8, "fp16"]]}}}, "t")
    with pytest.raises(ValueError, match="per_expert"):     # a dense GEMM has no experts to loop over
        parse({"methods": {"dense": {"7168,2048": [[8, "per_expert"]]}}}, "t")


def test_auto_takes_the_table_else_w8a16_for_decode_rows_and_w8a8_for_prefill_rows(monkeypatch):
    from dcpctl.runtime.kernels import fp8_cublas, fp8_tiles
    t, none = parse(METHODS, "t"), Fp8Tables()
    m = lambda rows, setting="auto", shape=DOWN, E=1, tab=t: fp8_tiles.method(*shape, rows, E, setting,  # noqa: E731
                                                                             tables=tab)
    # no GPU here: cuBLAS's entries and rule fall back to the Triton w8a8 kernel
    assert [m(r) for r in (1, 8, 9, 64, 65, 5000)] == ["w8a16", "w8a16", "w8a8", "w8a8", "w8a8", "w8a8"]
    assert [m(r, tab=none) for r in (1, 64, 65, 5000)] == ["w8a16", "w8a16", "w8a8", "w8a8"]
    assert [m(r, "w8a16") for r in (1, 5000)] == ["w8a16"] * 2
    assert [m(r, "w8a8") for r in (1, 8, 5000)] == ["w8a8"] * 3
    # grouped: per_expert is the MoE's choice (fp8_tiles.per_expert), the GEMM itself then the rule's
    assert [m(r, shape=UP, E=16) for r in (64, 65, 128, 129)] == ["w8a16", "w8a8", "w8a8", "w8a8"]
    assert [fp8_tiles.per_expert(*UP, r, "auto", tables=t) for r in (64, 128, 129)] == [False, False, True]
    assert not fp8_tiles.per_expert(*UP, 500, "w8a16", tables=t)
    assert fp8_tiles.per_expert(*UP, 500, "w8a8", tables=t)
    # without an entry: past PER_EXPERT_ROWS rows an expert
    rule = fp8_tiles.PER_EXPERT_ROWS
    assert [fp8_tiles.per_expert(*UP, r, "auto", tables=none) for r in (rule, rule + 1)] == [False, True]
    # where cuBLAS runs: its table entries and the rule's prefill rows take it
    monkeypatch.setattr(fp8_cublas, "usable", lambda N, K, block, device: True)
    assert [m(r) for r in (8, 64, 65, 5000)] == ["w8a16", "w8a8", "cublas", "cublas"]
    assert [m(r, tab=none) for r in (64, 65)] == ["w8a16", "cublas"]
    assert [m(r, "w8a8") for r in (64, 65)] == ["w8a8", "cublas"]
    assert m(5000, shape=UP, E=16) == "w8a8"                             # no cuBLAS for grouped GEMMs
    k, a16 = fp8_tiles.choose(*DOWN, 5000, 1, "auto", tables=t)
    assert k == fp8_cublas.CUBLAS and not a16
    k, a16 = fp8_tiles.choose(*DOWN, 4, 1, "auto", tables=t)
    assert a16 and k == choose_tiles(*DOWN, 4, 1, True, 4, tables=t)


def test_cublas_takes_only_weights_as_stored():
    from dcpctl.runtime.kernels import fp8_cublas
    assert fp8_cublas.shape_ok(7168, 2048, (128, 128)) and fp8_cublas.shape_ok(576, 7168, (128, 128))
    assert not fp8_cublas.shape_ok(7168, 1536 + 128, (128, 128))     # 13 K blocks: not a multiple of 4
    assert not fp8_cublas.shape_ok(7168, 2048, (64, 64)) and not fp8_cublas.shape_ok(7170, 2048, (128, 128))
    assert fp8_cublas.probe("cpu")[0] is False
    assert not fp8_cublas.usable(7168, 2048, (128, 128), "cpu")
