"""benchmarks/fp8_gemm.py's CPU half: the fp8_gemm tuning table its sweep's timings make."""
import importlib.util
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "fp8_gemm.py"
spec = importlib.util.spec_from_file_location("fp8_gemm_bench", SCRIPT)
bench = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bench)


def test_table_keeps_the_least_total_few_rows_setting_and_the_m_where_it_beats_mma():
    from dcpctl.runtime.models.fp8_gemm import BEFORE_TILES, GemvTiles, Tiles
    a, b, wide = GemvTiles(), GemvTiles(bn=32), Tiles(bn=128)

    def row(M, timed, best, N=7168):
        return {"N": N, "K": 2048, "M": M, "best_tiles": bench.tiles_dict(best),
                "timed": [{"tiles": bench.tiles_dict(t), "us": us} for t, us in timed]}
    rows = [row(1, [(BEFORE_TILES, 10.0), (a, 6.0), (b, 7.0)], a),
            row(16, [(BEFORE_TILES, 12.0), (a, 14.0), (b, 11.0)], b),   # b: 18 us in all, a: 20
            row(64, [(BEFORE_TILES, 20.0), (wide, 15.0)], wide),
            row(1, [(BEFORE_TILES, 5.0), (a, 6.0)], BEFORE_TILES, N=576)]      # the MMA kernel faster: None
    data = bench.table(rows)
    assert data["dense"] == {"7168,2048": [[64, {"bn": 128}]]}
    assert data["gemv"] == {"576,2048": None, "7168,2048": {"bn": 32}}    # b beats every MMA setting at M = 1, 16
    from dcpctl.runtime.models.fp8_tiles import parse
    assert parse(data, "t").dense == {(7168, 2048): ((64, wide),)} and parse(data, "t").gemv[(7168, 2048)] == b
    assert bench.tiles_of(bench.tiles_dict(b)) == b and bench.tiles_of(bench.tiles_dict(wide)) == wide
