"""Run a module with decode attention's programs per SM set: pps.py N MODULE args"""
import runpy, sys
from kvspill.kernels import decode_attention

decode_attention._PROGRAMS_PER_SM = int(sys.argv[1])
sys.argv = [sys.argv[2]] + sys.argv[3:]
runpy.run_module(sys.argv[0], run_name="__main__")
