// The layout of a worker group's ranks and the groups cut from it (docs/PARALLEL.md, "The
// layout"): tp × dp ranks, a tensor-parallel group of tp consecutive ranks, a data-parallel
// group of the ranks with the same place in their TP groups.
//
// Each group exists twice where the backend's memory is not the host's: once for host values
// (losses, counts, norms, the readout's log-sum-exps) and once for the backend's buffers
// (gradients, parameters, activations). On the CPU both are the same communicator; on CUDA the
// device group is made over the host group's ranks by a factory the caller passes (an NCCL
// communicator, ops/nccl_communicator.h), so that this floor knows nothing of devices.
#pragma once

#include <functional>
#include <memory>

#include "comm/communicator.h"
#include "common/config.h"
#include "common/status.h"

namespace fullband::comm {

// This rank's place in a tp × dp worker group.
struct Layout {
  int tp = 1, dp = 1;
  int tp_rank = 0, dp_rank = 0;
};
// INVALID_ARGUMENT when the world size is not parallel.tp × parallel.dp.
StatusOr<Layout> MakeLayout(const ParallelConfig& parallel, int world_size, int rank);

// Makes the communicator for the backend's memory over the ranks of a host group (collective
// over `host`).
using DeviceGroupFactory =
    std::function<StatusOr<std::unique_ptr<Communicator>>(Communicator& host)>;

class ParallelGroups {
 public:
  // Cuts the TP and DP groups of `layout` from `world` (collective over `world`: every rank
  // calls it, in the same order as its other collectives), then, with `device_group`, the device
  // groups of more than one rank. `world` outlives the groups. Errors: the communicators'.
  static StatusOr<std::unique_ptr<ParallelGroups>> Create(
      Communicator* world, const Layout& layout, const DeviceGroupFactory& device_group = {});

  const Layout& layout() const { return layout_; }
  Communicator* world() const { return world_; }
  // The tensor-parallel group, null for tp = 1; the data-parallel group (the world for tp = 1).
  Communicator* tp() const { return tp_; }
  Communicator* dp() const { return dp_; }
  // The same groups for the backend's memory.
  Communicator* tp_device() const { return tp_device_; }
  Communicator* dp_device() const { return dp_device_; }

  // What this rank handed to the collectives of all its groups.
  Communicator::Traffic traffic() const;

 private:
  ParallelGroups(Communicator* world, const Layout& layout)
      : layout_(layout), world_(world), dp_(world) {}

  Layout layout_;
  Communicator* world_;
  Communicator* tp_ = nullptr;
  Communicator* dp_ = nullptr;
  Communicator* tp_device_ = nullptr;
  Communicator* dp_device_ = nullptr;
  std::unique_ptr<Communicator> tp_owned_, dp_owned_, tp_device_owned_, dp_device_owned_;
};

}  // namespace fullband::comm
