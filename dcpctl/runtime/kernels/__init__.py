"""The model's own kernels and their tuning rules: norms, rope, SwiGLU, embedding, GEMMs (16-bit and
block-FP8), the MoE combine, PDL and the decode step's fusions. The models (runtime/models) call them; the
tables are dcpctl/tuning."""
