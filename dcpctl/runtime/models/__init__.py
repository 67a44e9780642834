"""DeepSeek-V2/V3, Kimi K2 and Kimi Linear (hybrid MLA + KDA) in absorbed-MLA form, TP/EP/attention-DP
sharded.

    load_model(path, ps, replicate_q, dtype, device, progress=None) -> DeepseekModel | KimiLinearModel
    DeepseekModel.forward(input_ids [T], positions [T], ctx) -> hidden [T, D]
    DeepseekModel.logits(hidden [T, D]) -> [T, vocab]
    read_config(path) -> MlaConfig;  ModelLoadError for anything the runtime cannot load
    model.kda_pool: KdaStatePool (None unless hybrid);  model.release(rid) when a request ends
"""
from dcpctl.runtime.models.config import MlaConfig, ModelLoadError
from dcpctl.runtime.models.deepseek import DeepseekModel
from dcpctl.runtime.models.kda_state import KdaPoolError, KdaStatePool
from dcpctl.runtime.models.kimi_linear import KimiLinearModel
from dcpctl.runtime.models.loader import load_model, read_config

__all__ = ["DeepseekModel", "KdaPoolError", "KdaStatePool", "KimiLinearModel", "MlaConfig", "ModelLoadError",
           "load_model", "read_config"]
