# Entry points. `make demo` and `make test` each install missing Debian packages, build, then
# run the bundled default simulation or the whole test suite.

BUILD ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
CLUSTER ?= topologies/dgx-a100-superpod.yaml
WORKLOAD ?= workloads/gpt3-175b.yaml
OUT ?= out

.PHONY: setup build demo test bench clean

setup:
	./tools/setup.sh

build: setup
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)

demo: build
	./$(BUILD)/stepsim run --cluster $(CLUSTER) --workload $(WORKLOAD) --out $(OUT)
	@echo "wrote $(OUT)/summary.json and $(OUT)/trace.json (open the trace in https://ui.perfetto.dev)"

test:
	./tools/setup.sh --browser
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release -DSTEPSIM_WERROR=ON $(CMAKE_FLAGS)
	cmake --build $(BUILD) -j$(JOBS)
	cd $(BUILD) && ctest --output-on-failure -j$(JOBS)

bench: build
	./$(BUILD)/bench/step_bench

clean:
	rm -rf $(BUILD) $(OUT)
