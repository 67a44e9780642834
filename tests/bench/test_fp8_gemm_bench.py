"""benchmarks/fp8_gemm.py's CPU half: the fp8_gemm tuning table its sweep's timings make."""
from benchmarks import fp8_gemm as bench


def test_table_keeps_the_mma_best_per_m_and_the_few_rows_setting_at_one_row():
    from dcpctl.runtime.kernels.fp8_gemm import BEFORE_TILES, GemvTiles, Tiles
    a, b, wide = GemvTiles(), GemvTiles(bn=32), Tiles(bn=128)

    def row(M, timed, best, N=7168):
        return {"N": N, "K": 2048, "M": M, "best_tiles": bench.tiles_dict(best),
                "timed": [{"tiles": bench.tiles_dict(t), "us": us} for t, us in timed]}
    rows = [row(1, [(BEFORE_TILES, 10.0), (a, 7.0), (b, 6.0)], b),
            # past GEMV_ROWS: not the few-rows kernel's
            row(16, [(BEFORE_TILES, 12.0), (a, 11.0), (b, 14.0)], a),
            row(64, [(BEFORE_TILES, 20.0), (wide, 15.0)], wide),
            # w8a8 prefill rows: "dense" serves them
            row(256, [(BEFORE_TILES, 50.0), (wide, 40.0)], wide),
            row(1, [(BEFORE_TILES, 5.0), (a, 6.0)], BEFORE_TILES, N=576),    # the MMA kernel faster: None
            # not timed at 1 row: no gemv entry
            row(8, [(BEFORE_TILES, 5.0), (a, 16.0)], BEFORE_TILES, N=4096)]
    data = bench.table(rows)
    # the MMA kernel's fastest setting at every swept M it runs (past GEMV_ROWS), the default kept where it
    # won
    assert data["dense"] == {"4096,2048": [[8, {}]], "7168,2048": [[16, {}], [256, {"bn": 128}]]}
    assert data["gemv"] == {"576,2048": None, "7168,2048": {"bn": 32}}    # b beats every MMA setting at M = 1
    from dcpctl.runtime.kernels.fp8_tiles import choose_tiles, parse
    tab = parse(data, "t")
    assert tab.dense[(7168, 2048)] == ((16, BEFORE_TILES), (256, wide)) and tab.gemv[(7168, 2048)] == b
    assert ([choose_tiles(7168, 2048, m, tables=tab) for m in (1, 16, 17, 256)]
            == [b, BEFORE_TILES, wide, wide])
    assert bench.tiles_of(bench.tiles_dict(b)) == b and bench.tiles_of(bench.tiles_dict(wide)) == wide


def test_a_w8a16_sweep_writes_its_own_dense_section_and_merges_into_the_table(tmp_path):
    from dcpctl import tuning
    from dcpctl.runtime.kernels.fp8_gemm import BEFORE_TILES, Tiles
    from dcpctl.runtime.kernels.fp8_tiles import choose_tiles, parse
    wide, swapped = Tiles(bn=128, per_sm=4, max_split=4, fold=True), Tiles(bn=128, warps=8, swap=True,
                                                                           fold=True)

    def row(M, timed, N=36864, K=7168):
        return {"N": N, "K": K, "M": M, "mode": "w8a16",
                "timed": [{"tiles": bench.tiles_dict(t), "us": us} for t, us in timed]}
    rows = [row(8, [(BEFORE_TILES, 98.9), (wide, 87.1)]), row(16, [(BEFORE_TILES, 98.5), (wide, 88.1)]),
            row(32, [(BEFORE_TILES, 153.5), (wide, 120.0), (swapped, 125.0)]),
            row(64, [(BEFORE_TILES, 225.2), (wide, 165.6), (swapped, 156.6)]),
            row(128, [(BEFORE_TILES, 400.0), (swapped, 300.0)]),      # w8a16 prefill rows: the rules'
                                                                      # settings
            row(32, [(BEFORE_TILES, 70.0), (wide, 75.0)], 7168, 18432),
            row(64, [(BEFORE_TILES, 72.0)], 7168, 18432)]
    data = bench.table(rows)
    assert data["dense"] == {}       # w8a8's section: not this sweep's (a merge keeps the table's)
    assert data["dense_w8a16"] == {"36864,7168": [[32, bench.fields(wide)], [64, bench.fields(swapped)]],
                                   "7168,18432": [[64, {}]]}     # the default won at every M: said so
    old = {"dense": {"36864,7168": [[64, {"bn": 32}]]},
           "dense_w8a16": {"7168,18432": [[64, {"fold": True}]], "576,7168": [[16, {"swap": True}]]}}
    path = tuning.write(tmp_path / "t.json", "fp8_gemm", "NVIDIA H200", 90, "python x", "abc1234", old)
    merged, _ = bench.merge(data, "c", str(path), {f"{r['N']},{r['K']}" for r in rows})
    tab = parse(merged, "t")
    assert ([choose_tiles(36864, 7168, m, a16=True, tables=tab) for m in (8, 32, 33, 64)]
            == [wide, wide, swapped, swapped])
    assert choose_tiles(36864, 7168, 8, a16=False, tables=tab) == Tiles(bn=32)  # w8a8 keeps its own section's
    assert choose_tiles(7168, 18432, 40, a16=True, tables=tab) == BEFORE_TILES   # measured: not the old fold
    assert merged["dense_w8a16"]["576,7168"] == old["dense_w8a16"]["576,7168"]   # not swept: kept


def _grouped_row(rows_per_expert, timed, mode="w8a16", N=4096, K=7168):
    return {"N": N, "K": K, "M": rows_per_expert * 2, "experts": 16, "top_k": 8,
            "rows_per_expert": rows_per_expert, "mode": mode, "bf16_us": 50.0,
            "timed": [{"tiles": bench.tiles_dict(t), "us": us} for t, us in timed]}


def test_grouped_sections_keep_a_setting_only_where_it_beats_the_default_by_the_margin():
    from dcpctl.runtime.kernels.fp8_gemm import DEFAULT_GEMV, DEFAULT_TILES, M_TILE_ROWS, Tiles
    from dcpctl.runtime.kernels.fp8_tiles import choose_tiles, parse
    fold, swap = Tiles(fold=True), Tiles(swap=True, fold=True)
    near = 100.0 * (1 - bench.GROUPED_MARGIN) + 0.5            # faster than the default, but within the
                                                               # margin
    # MMA settings only
    rows = [_grouped_row(2, [(DEFAULT_TILES, 100.0), (DEFAULT_GEMV, 50.0), (fold, 80.0)]),
            _grouped_row(4, [(DEFAULT_TILES, 100.0), (fold, 70.0), (swap, 90.0)]),
            # within the margin: the default
            _grouped_row(8, [(DEFAULT_TILES, 100.0), (fold, near)]),
            _grouped_row(16, [(DEFAULT_TILES, 100.0), (swap, 60.0)]),
            _grouped_row(24, [(DEFAULT_TILES, 100.0), (swap, 61.0), (fold, 99.0)]),  # swap again: one bound
            _grouped_row(32, [(DEFAULT_TILES, 100.0), (fold, near)]),  # trailing defaults: no bound
            _grouped_row(M_TILE_ROWS, [(DEFAULT_TILES, 100.0), (fold, float("inf"))]),  # failed: the default
            # prefill rows: not in the table
            _grouped_row(2 * M_TILE_ROWS, [(DEFAULT_TILES, 100.0), (fold, 10.0)]),
            _grouped_row(16, [(DEFAULT_TILES, 100.0), (swap, 10.0)], N=7168, K=2048),
            _grouped_row(16, [(DEFAULT_TILES, 100.0), (fold, 10.0)], mode="w8a8", N=7168, K=2048),
            _grouped_row(16, [(DEFAULT_TILES, 100.0), (fold, 10.0)], mode="w8a16f")]  # not a served method
    data = bench.table(rows)
    assert (data["dense"], data["gemv"]) == ({}, {})
    assert data["grouped_w8a16"] == {"4096,7168": [[4, {"fold": True}], [8, {}],
                                                   [24, {"swap": True, "fold": True}]],
                                     "7168,2048": [[16, {"swap": True, "fold": True}]]}
    assert data["grouped"] == {"7168,2048": [[16, {"fold": True}]]}
    assert bench.grouped_choice(rows[2]) == (DEFAULT_TILES, 100.0, 100.0)
    assert bench.grouped_choice(rows[1]) == (fold, 70.0, 100.0)
    # what the runtime then picks at the served MoE's rows per expert (16 experts, w8a16)
    tab = parse(data, "t")
    pick = lambda r: choose_tiles(4096, 7168, r, 16, True, 16 * r, tables=tab)  # noqa: E731
    assert ([pick(r) for r in (3, 4, 6, 8, 12, 20, 24, 32)]
            == [fold, fold] + [DEFAULT_TILES] * 2 + [swap] * 3 + [DEFAULT_TILES])
    assert pick(2) == DEFAULT_GEMV    # the few-rows rule first (2 rows an expert, 32 in all)


def test_merge_keeps_the_sections_this_run_did_not_write(tmp_path):
    from dcpctl import tuning
    old = {"dense": {"576,7168": [[16, {}]]}, "dense_w8a16": {"576,7168": [[64, {"fold": True}]]},
           "gemv": {"24576,1536": None}, "grouped_w8a16": {"4096,7168": [[8, {"swap": True}]]}}
    path = tuning.write(tmp_path / "h200.json", "fp8_gemm", "NVIDIA H200", 90, "python x --sweep", "abc1234",
                        old)
    new = {"dense": {}, "gemv": {}, "grouped_w8a16": {"4096,7168": [[32, {"fold": True}]]}}
    data, command = bench.merge(new, "python -m benchmarks.fp8_gemm --grouped", str(path))
    assert data == {**old, "grouped_w8a16": new["grouped_w8a16"]}
    assert command == ("python -m benchmarks.fp8_gemm --grouped; sections dense, dense_w8a16, gemv kept "
                       f"from {path} (commit abc1234: python x --sweep)")
    assert bench.merge(old, "c", str(path)) == (old, "c")     # every section written: nothing kept
    # a sweep of one new shape: the other shapes of the sections it writes are kept, a swept shape is replaced
    new = {"dense": {}, "dense_w8a16": {"36864,7168": [[64, {"bn": 128}]]}, "gemv": {}}
    data, command = bench.merge(new, "c", str(path), {"36864,7168", "576,7168"})
    assert data["dense_w8a16"] == new["dense_w8a16"]          # 576,7168 was swept: its old entry goes
    data, command = bench.merge(new, "c", str(path), {"36864,7168"})
    assert data["dense_w8a16"] == {"576,7168": [[64, {"fold": True}]], "36864,7168": [[64, {"bn": 128}]]}
    assert data["dense"] == old["dense"] and data["grouped_w8a16"] == old["grouped_w8a16"]
    assert "dense_w8a16 of shapes 576,7168 kept" in command


def test_grouped_rows_set_the_token_counts_and_the_decode_sweep():
    import argparse
    from dcpctl.runtime.kernels.fp8_gemm import M_TILE_ROWS
    args = argparse.Namespace(grouped_rows=[2, 4, 8, 16, 24, 32, 48, 64, 2 * M_TILE_ROWS], experts=16,
                              batches=[1, 8], a16_candidates=False)
    assert bench.grouped_batches(args) == [4, 8, 16, 32, 48, 64, 96, 128, 256]
    # each M's rows per expert
    assert [M * 8 // 16 for M in bench.grouped_batches(args)] == args.grouped_rows
    assert bench.grouped_candidates(args, 64, True) == bench.GROUPED_DECODE["w8a16"]
    assert bench.grouped_candidates(args, 256, True) == [] == bench.grouped_candidates(args, 64, False)
    assert bench.GROUPED_DECODE["w8a16"][0] == bench.DEFAULT_TILES == bench.GROUPED_DECODE["w8a8"][0]
    plain = argparse.Namespace(**{**vars(args), "grouped_rows": None})
    assert bench.grouped_batches(plain) == [1, 8] and bench.grouped_candidates(plain, 64, True) == []
