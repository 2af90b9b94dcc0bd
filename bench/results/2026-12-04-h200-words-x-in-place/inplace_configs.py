"""Write MMA_CONFIGS with x_in_place on every words-form entry, as a KVSPILL_MMA_CONFIGS file."""
import dataclasses, json, sys
from kvspill.kernels.gguf_mma_configs import MMA_CONFIGS
out = {f"{t},{n}": dataclasses.asdict(dataclasses.replace(c, x_in_place=True)) for (t, n), c in MMA_CONFIGS.items() if c.words}
open(sys.argv[1], "w").write(json.dumps(out, indent=1))
print(len(out), "entries ->", sys.argv[1])
