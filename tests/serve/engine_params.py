"""The request parameters SGLang 0.5.23 and vLLM 0.34.0 document, as their own protocol classes declare them.

Read from the released wheels (sglang-0.5.23, vllm-0.34.0 on PyPI), every annotated field in declaration
order:
    SGLANG_COMPLETIONS      sglang/srt/entrypoints/openai/protocol.py  CompletionRequest
    SGLANG_CHAT             sglang/srt/entrypoints/openai/protocol.py  ChatCompletionRequest
    SGLANG_GENERATE         sglang/srt/managers/io_struct.py           GenerateReqInput (POST /generate)
    SGLANG_SAMPLING_PARAMS  sglang/srt/sampling/sampling_params.py     SamplingParams (/generate's
                            sampling_params; without the fields normalize() derives: stop_strs,
                            stop_regex_strs, their max lengths, is_normalized, ebnf_full_assistant)
    VLLM_COMPLETIONS        vllm/entrypoints/openai/completion/protocol.py       CompletionRequest
    VLLM_CHAT               vllm/entrypoints/openai/chat_completion/protocol.py  ChatCompletionRequest
tests/serve/test_parameters.py sends every one to the server: applied, or refused with a 400 naming it.
"""

SGLANG_COMPLETIONS = (
    'model', 'prompt', 'best_of', 'echo', 'frequency_penalty', 'logit_bias', 'logprobs', 'max_tokens', 'n',
    'presence_penalty', 'seed', 'stop', 'stream', 'stream_options', 'suffix', 'temperature', 'top_p', 'user',
    'return_hidden_states', 'return_routed_experts', 'routed_experts_start_len',
    'return_cached_tokens_details', 'return_spec_tokens_details', 'return_token_ids', 'top_k', 'min_p',
    'min_tokens', 'json_schema', 'regex', 'ebnf', 'repetition_penalty', 'stop_token_ids', 'stop_regex',
    'no_stop_trim', 'ignore_eos', 'skip_special_tokens', 'lora_path', 'session_id', 'session_params',
    'response_format', 'custom_params', 'custom_logit_processor', 'watermark', 'images_config',
    'mm_processor_kwargs', 'data_parallel_rank', 'rid', 'extra_key', 'cache_salt', 'priority',
'custom_labels', )

SGLANG_CHAT = (
    'messages', 'model', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'max_tokens',
    'max_completion_tokens', 'n', 'presence_penalty', 'response_format', 'seed', 'stop', 'stream',
    'stream_options', 'temperature', 'top_p', 'user', 'tools', 'tool_choice', 'parallel_tool_calls',
    'return_hidden_states', 'return_routed_experts', 'routed_experts_start_len',
    'return_cached_tokens_details', 'return_spec_tokens_details', 'return_prompt_token_ids',
    'return_token_ids', 'return_meta_info', 'return_input_ids_in_sglext', 'return_output_ids_in_sglext',
    'return_sampling_mask', 'sampling_logprobs_mode', 'return_flat_raw_output_top_logprobs',
    'return_flat_raw_top_logprobs_b64', 'reasoning_effort', 'thinking', 'task', 'top_k', 'min_p',
    'min_tokens', 'regex', 'ebnf', 'repetition_penalty', 'stop_token_ids', 'stop_regex', 'no_stop_trim',
    'ignore_eos', 'continue_final_message', 'skip_special_tokens', 'lora_path', 'session_id',
    'session_params', 'separate_reasoning', 'stream_reasoning', 'chat_template_kwargs', 'max_dynamic_patch',
    'min_dynamic_patch', 'use_audio_in_video', 'images_config', 'video_config', 'mm_processor_kwargs',
    'custom_logit_processor', 'custom_params', 'watermark', 'input_ids', 'rid', 'extra_key', 'cache_salt',
    'priority', 'data_parallel_rank',
)

SGLANG_GENERATE = (
    'rid', 'session_id', 'text', 'input_ids', 'input_embeds', 'image_data', 'video_data', 'audio_data',
    'mm_hashes', 'mm_content_hashes', 'use_audio_in_video', 'video_config', 'sampling_params', 'watermark',
    'return_logprob', 'logprob_start_len', 'top_logprobs_num', 'token_ids_logprob', 'return_sampling_mask',
    'sampling_logprobs_mode', 'return_text_in_logprobs', 'return_flat_raw_top_logprobs',
    'return_flat_raw_output_top_logprobs', 'return_flat_raw_top_logprobs_b64', 'stream', 'log_metrics',
    'return_hidden_states', 'return_routed_experts', 'routed_experts_start_len', 'return_indexer_topk',
    'modalities', 'session_params', 'lora_path', 'lora_id', 'custom_logit_processor',
    'positional_embed_overrides', 'bootstrap_host', 'bootstrap_port', 'bootstrap_room', 'bootstrap_pair_key',
    'decode_tp_size', 'routed_dp_rank', 'data_parallel_rank', 'disagg_prefill_dp_rank', 'routing_key',
    'conversation_id', 'http_worker_ipc', 'background', 'require_reasoning', 'max_thinking_tokens',
    'priority', 'extra_key', 'no_logs', 'custom_labels', 'return_bytes', 'return_entropy',
    'return_prompt_token_ids', 'external_trace_header', 'received_time', 'need_wait_for_mm_inputs',
    'num_items_assigned', 'encoder_urls', 'max_dynamic_patch', 'min_dynamic_patch', 'image_max_dynamic_patch',
    'video_max_dynamic_patch', 'images_config', 'mm_processor_kwargs', 'multi_item_delimiter_indices',
    'token_indices_to_pool', 'cache_salt', 'kv_hints',
)

SGLANG_SAMPLING_PARAMS = (
    'max_new_tokens', 'stop', 'stop_token_ids', 'stop_regex', 'temperature', 'top_p', 'top_k', 'min_p',
    'frequency_penalty', 'presence_penalty', 'repetition_penalty', 'min_new_tokens', 'n', 'beam_width',
    'json_schema', 'regex', 'ebnf', 'structural_tag', 'ignore_eos', 'skip_special_tokens',
    'spaces_between_special_tokens', 'no_stop_trim', 'stream_interval', 'logit_bias', 'sampling_seed',
    'custom_params', 'watermark',
)

VLLM_COMPLETIONS = (
    'model', 'prompt', 'echo', 'frequency_penalty', 'logit_bias', 'logprobs', 'max_tokens', 'n',
    'presence_penalty', 'seed', 'stop', 'stream', 'stream_options', 'suffix', 'temperature', 'top_p', 'user',
    'use_beam_search', 'top_k', 'min_p', 'repetition_penalty', 'watermarking', 'length_penalty',
    'stop_token_ids', 'include_stop_str_in_output', 'ignore_eos', 'min_tokens', 'skip_special_tokens',
    'spaces_between_special_tokens', 'truncate_prompt_tokens', 'truncation_side', 'allowed_token_ids',
    'prompt_logprobs', 'logprob_token_ids', 'bad_words', 'prompt_embeds', 'add_special_tokens',
    'response_format', 'structured_outputs', 'priority', 'request_id', 'session_id',
    'return_tokens_as_token_ids', 'return_token_ids', 'return_weight_versions', 'routed_experts_prompt_start',
    'return_token_offsets', 'mm_payload', 'return_mm_kwargs', 'cache_salt', 'kv_transfer_params',
    'ec_transfer_params', 'vllm_xargs', 'repetition_detection', 'thinking_token_budget', 'stream_interval',
)

VLLM_CHAT = (
    'messages', 'model', 'frequency_penalty', 'logit_bias', 'logprobs', 'top_logprobs', 'max_tokens',
    'max_completion_tokens', 'n', 'presence_penalty', 'response_format', 'seed', 'stop', 'stream',
    'stream_options', 'temperature', 'top_p', 'tools', 'tool_choice', 'reasoning_effort',
    'thinking_token_budget', 'include_reasoning', 'parallel_tool_calls', 'user', 'use_beam_search', 'top_k',
    'min_p', 'repetition_penalty', 'watermarking', 'length_penalty', 'stop_token_ids',
    'include_stop_str_in_output', 'ignore_eos', 'min_tokens', 'skip_special_tokens',
    'spaces_between_special_tokens', 'truncate_prompt_tokens', 'truncation_side', 'prompt_logprobs',
    'logprob_token_ids', 'allowed_token_ids', 'bad_words', 'echo', 'add_generation_prompt',
    'continue_final_message', 'add_special_tokens', 'documents', 'chat_template', 'chat_template_kwargs',
    'media_io_kwargs', 'mm_processor_kwargs', 'structured_outputs', 'priority', 'request_id', 'session_id',
    'return_tokens_as_token_ids', 'return_token_ids', 'return_weight_versions', 'routed_experts_prompt_start',
    'return_token_offsets', 'return_prompt_text', 'mm_payload', 'return_mm_kwargs', 'cache_salt',
    'kv_transfer_params', 'ec_transfer_params', 'vllm_xargs', 'repetition_detection', 'stream_interval',
)
