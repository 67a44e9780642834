"""DeepSeek-V2/V3 and Kimi K2 in absorbed-MLA form, TP/EP/attention-DP sharded.

    load_model(path, ps, decisions, dtype, device, progress=None) -> DeepseekModel
    DeepseekModel.forward(input_ids [T], positions [T], ctx) -> hidden [T, D]
    DeepseekModel.logits(hidden [T, D]) -> [T, vocab]
    read_config(path) -> MlaConfig;  ModelLoadError for anything the runtime cannot load
"""
from dcpctl.runtime.models.config import MlaConfig, ModelLoadError, read_config
from dcpctl.runtime.models.deepseek import DeepseekModel
from dcpctl.runtime.models.loader import load_model

__all__ = ["DeepseekModel", "MlaConfig", "ModelLoadError", "load_model", "read_config"]
