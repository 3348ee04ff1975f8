# Entry points. `make demo` and `make test` each install missing Debian packages, build, then
# run the bundled default simulation or the whole test suite.

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CLUSTER ?= topologies/dgx-a100-superpod.yaml
WORKLOAD ?= workloads/gpt3-175b.yaml
OUT ?= out
FUZZ_SECONDS ?= 120

.PHONY: setup build demo test sanitize fuzz bench bench-scale clean

setup:
	./tools/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/stepsim run --cluster $(CLUSTER) --workload $(WORKLOAD) --out $(OUT) --trace-format json.gz
	@echo "wrote $(OUT)/summary.json and $(OUT)/trace.json.gz (open the trace in https://ui.perfetto.dev)"

test:
	./tools/setup.sh --browser
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSTEPSIM_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

# The parser/config, model, graph and engine unit tests under ASan+UBSan (tools/sanitize.sh;
# `tools/sanitize.sh full` runs the whole suite so).
sanitize: setup
	./tools/sanitize.sh

# libFuzzer on the configuration front end for FUZZ_SECONDS (tools/fuzz.sh; installs clang-14).
fuzz: setup
	./tools/fuzz.sh $(FUZZ_SECONDS)

# `bench`: the everyday benchmarks; `bench-scale`: the 1 k to 100 k GPU series and the issue's
# large cases (minutes). Each prints the JSON table and rewrites docs/performance.md's table
# between its markers (tools/bench_table.py), with the other set's last results beside its own;
# BENCH_NOTE is a sentence added above the table (e.g. what machine it ran on).
BENCH_NOTE ?=
bench: build
	./$(BUILD)/bench/step_bench --benchmark_filter='-scale/' --benchmark_out=$(BUILD)/bench.json \
	  --benchmark_out_format=json
	./tools/bench_table.py $(wildcard $(BUILD)/bench-scale.json) $(BUILD)/bench.json \
	  --doc docs/performance.md --note "$(BENCH_NOTE)"

bench-scale: build
	./$(BUILD)/bench/step_bench --benchmark_filter='scale/' --benchmark_out=$(BUILD)/bench-scale.json \
	  --benchmark_out_format=json
	./tools/bench_table.py $(wildcard $(BUILD)/bench.json) $(BUILD)/bench-scale.json \
	  --doc docs/performance.md --note "$(BENCH_NOTE)"

clean:
	rm -rf $(BUILD) $(OUT)
