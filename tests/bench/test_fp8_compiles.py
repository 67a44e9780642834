"""benchmarks/fp8_compiles.py: Triton's own cache keys of the FP8 GEMMs, counted on the CPU (no GPU, no
compile)."""
from benchmarks import fp8_compiles as fc

O_PROJ = {"o_proj": fc.DENSE["o_proj"]}


def test_batch_sizes_of_one_tile_setting_share_one_kernel():
    # o_proj at 12 and 16 rows: the same tiles (BEFORE_TILES, 16-row MMA tiles); the row count is not
    # specialized on (16 divides one and not the other), so the decode graphs of both batch sizes use one
    # compiled kernel
    assert fc.count({"dense": [12, 16], "grouped": []}, O_PROJ)["distinct"] == 1


def test_other_settings_are_other_kernels():
    # 8 rows: w8a16's own o_proj setting (bn 128); 1 row: the few-rows kernel; 24 rows: 32-row MMA tiles
    got = fc.count({"dense": [1, 8, 12, 24], "grouped": []}, O_PROJ)
    assert got["distinct"] == 4 and got["by_kernel"] == {"_fp8_gemv_kernel": 1, "_fp8_gemm_kernel": 3}


def test_row_counts_are_the_graph_sizes_and_the_warm_up_ladder():
    rows = fc.row_counts(16, 64)
    assert rows["dense"] == [1, 2, 4, 8, 12, 15, 16, 23, 24, 31, 32, 40, 47, 48, 56, 63, 64]
    assert rows["grouped"] == [8 * r for r in rows["dense"]]
