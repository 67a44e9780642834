"""Every request parameter SGLang 0.5.23 and vLLM 0.34.0 document that this server does not apply: only its
neutral values are accepted, any other is a 400 naming it, on every route alike.

The parameters the server applies are the fields of the bodies in protocol.py; every other parameter of the
engines' protocol classes (SGLang's CompletionRequest, ChatCompletionRequest, GenerateReqInput and
SamplingParams; vLLM's CompletionRequest and ChatCompletionRequest) is named here with the values that mean
"off" (the engines' defaults, and null).  tests/serve/test_parameters.py sends each one from the engines' own
lists.  A name that is neither (no engine has it) is ignored, as both engines ignore unknown fields.
"""
from __future__ import annotations

from typing import Any

from dcpctl.runtime.server.protocol import ApiError

NULL: tuple[Any, ...] = (None,)
OFF = (None, False)
ANY_BOOL = (None, False, True)   # meaningful only with a feature this model has none of (reasoning, tools),
                                 # as there

# name -> the accepted values; grouped by why the server has no such feature
NEUTRAL: dict[str, tuple[Any, ...]] = {
    # sampling and decoding it does not implement
    "best_of": (None, 1), "use_beam_search": OFF, "length_penalty": (None, 1), "beam_width": NULL,
    "presence_penalty": (None, 0), "frequency_penalty": (None, 0), "repetition_penalty": (None, 1),
    "bad_words": (None, []), "stop_regex": NULL, "repetition_detection": NULL, "watermark": NULL,
    "watermarking": OFF, "custom_logit_processor": NULL, "custom_params": NULL, "structural_tag": NULL,
    "spaces_between_special_tokens": (None, True), "suffix": (None, ""), "stream_interval": (None, 1),
    # logprobs beyond the chosen token's
    "prompt_logprobs": NULL, "logprob_token_ids": NULL, "logprob_start_len": (None, -1),
    "top_logprobs_num": (None, 0), "token_ids_logprob": NULL, "sampling_logprobs_mode": NULL,
    "return_sampling_mask": OFF, "return_flat_raw_output_top_logprobs": OFF,
    "return_flat_raw_top_logprobs": OFF,
    "return_flat_raw_top_logprobs_b64": ANY_BOOL,   # the format of the two above: nothing while they are off
    # outputs it does not produce
    "return_hidden_states": OFF, "return_routed_experts": OFF, "routed_experts_start_len": (None, 0),
    "routed_experts_prompt_start": (None, 0), "return_cached_tokens_details": OFF,
    "return_spec_tokens_details": OFF, "return_meta_info": OFF, "return_input_ids_in_sglext": OFF,
    "return_output_ids_in_sglext": OFF, "return_indexer_topk": OFF, "return_bytes": OFF,
    "return_entropy": OFF, "return_weight_versions": OFF, "return_token_offsets": OFF,
    "return_mm_kwargs": NULL, "return_prompt_text": OFF,
    # tools, reasoning and chat templates: this model has no tool or reasoning parser; request templates are
    # refused as vLLM refuses them without --trust-request-chat-template
    "tools": (None, []), "tool_choice": (None, "none", "auto"), "functions": (None, []),
    "function_call": (None, "none"), "parallel_tool_calls": ANY_BOOL, "reasoning_effort": NULL,
    "thinking": NULL, "include_reasoning": ANY_BOOL, "separate_reasoning": ANY_BOOL,
    "stream_reasoning": ANY_BOOL, "thinking_token_budget": (None, -1), "max_thinking_tokens": NULL,
    "require_reasoning": OFF, "task": NULL, "chat_template": NULL, "documents": NULL, "verbosity": NULL,
    "web_search_options": NULL,
    # inputs other than text
    "image_data": NULL, "video_data": NULL, "audio_data": NULL, "input_embeds": NULL, "prompt_embeds": NULL,
    "mm_hashes": NULL, "mm_content_hashes": NULL, "modalities": (None, ["text"]), "audio": NULL,
    "use_audio_in_video": OFF, "video_config": NULL, "images_config": NULL, "mm_processor_kwargs": NULL,
    "media_io_kwargs": NULL, "mm_payload": (None, "tensors"), "max_dynamic_patch": NULL,
    "min_dynamic_patch": NULL, "image_max_dynamic_patch": NULL, "video_max_dynamic_patch": NULL,
    "encoder_urls": NULL, "need_wait_for_mm_inputs": NULL, "num_items_assigned": NULL,
    "multi_item_delimiter_indices": NULL, "token_indices_to_pool": NULL, "positional_embed_overrides": NULL,
    # adapters, routing, caching and deployment plumbing of the engines
    "lora_path": NULL, "lora_id": NULL, "session_id": NULL, "session_params": NULL, "conversation_id": NULL,
    "routing_key": NULL, "data_parallel_rank": NULL, "routed_dp_rank": NULL, "disagg_prefill_dp_rank": NULL,
    "bootstrap_host": NULL, "bootstrap_port": NULL, "bootstrap_room": NULL, "bootstrap_pair_key": NULL,
    "decode_tp_size": NULL, "kv_transfer_params": NULL, "ec_transfer_params": NULL, "kv_hints": NULL,
    "vllm_xargs": NULL, "extra_key": NULL, "cache_salt": NULL, "priority": (None, 0), "background": OFF,
    "http_worker_ipc": NULL, "received_time": NULL, "external_trace_header": NULL,
    # metrics and logging
    "custom_labels": NULL, "log_metrics": (None, True), "no_logs": OFF,
}


def neutral(value: Any, accepted: tuple[Any, ...]) -> bool:
    """Whether `value` is one of `accepted`: null only as null, a number of equal value (0 and 0.0 alike, a
    bool is no number here), anything else of the same type and value."""
    for a in accepted:
        if a is None or value is None:
            if a is value:
                return True
        elif type(a) is int and type(value) in (int, float):
            if value == a:
                return True
        elif type(value) is type(a) and value == a:
            return True
    return False


def refuse_unsupported(extra: dict[str, Any] | None, prefix: str = "") -> None:
    """400 naming the first parameter of `extra` (a body's fields beyond its declared ones) that NEUTRAL lists
    and that is set to anything but its neutral values."""
    for name, value in (extra or {}).items():
        accepted = NEUTRAL.get(name)
        if accepted is not None and not neutral(value, accepted):
            shown = ", ".join("null" if a is None else _json(a) for a in accepted)
            raise ApiError(400, f"{prefix}{name} is not supported by this server (accepted: {shown})",
                           prefix + name)


def _json(value: Any) -> str:
    import json
    return json.dumps(value)
