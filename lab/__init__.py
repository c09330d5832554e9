"""Lab tools: measurement and fitness tools for the people who develop Caovan, run from a checkout.

The sm_75 compile survey, the three GPU code paths comparisons run side by side, vLLM's own Triton kernels as a
baseline, the SM limit that gives the Turing proxy a 2080 Ti's SM count. The benchmarks, the scripts and the tests use
them; none is shipped in the wheel, and vLLM never loads them: what the plugin needs at run time lives in
caovan_kernels.
"""
