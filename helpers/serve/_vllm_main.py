"""Runs vLLM's server module as the program without making it the process's main module.

vLLM's CPU platform always starts its engine process with multiprocessing's ``spawn`` method,
and a spawned child first imports its parent's main module again. Under
``python -m vllm.entrypoints.openai.api_server`` that is vLLM's whole HTTP front end (FastAPI,
the OpenAI protocol models), which the engine never uses. Started as
``python -m helpers.serve._vllm_main vllm.entrypoints.openai.api_server <flags>``, the main
module is this one, which imports nothing; the child imports only what the engine needs. On a
2-core Xeon (float32, vLLM 0.32) the engine process began 8 s after the API server's first log
line instead of 12 s, and the server was ready 5-7 s sooner in two alternating pairs.

The module's name stays on the command line, so the course's process bookkeeping
(:func:`helpers.serve.group.name_of`, :func:`helpers.hardware.other_vllm_servers`) finds the
server as before, and ``sys.argv[0]`` is vLLM's file, so vLLM's own messages name it as they
would. :meth:`helpers.serve.config.Launch.process_argv` puts this in front on a CPU;
nothing imports it.
"""

import importlib.util
import runpy
import sys

if __name__ == "__main__":
    module = sys.argv.pop(1)
    sys.argv[0] = importlib.util.find_spec(module).origin
    runpy.run_module(module, run_name="__main__", alter_sys=False)  # alter_sys=True would make it __main__ again
