"""FlashInfer's JIT build of its fa3 MLA decode module, alone and timed."""
