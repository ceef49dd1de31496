#include "comm/process_groups.h"

#include <string>

namespace fullband::comm {

StatusOr<Layout> MakeLayout(const ParallelConfig& parallel, int world_size, int rank) {
  if (parallel.tp * parallel.dp != world_size) {
    return InvalidArgumentError("parallel: tp × dp = " + std::to_string(parallel.tp) + " × " +
                                std::to_string(parallel.dp) + " does not match the " +
                                std::to_string(world_size) + " rank(s) this run was started with");
  }
  Layout l;
  l.tp = static_cast<int>(parallel.tp);
  l.dp = static_cast<int>(parallel.dp);
  l.tp_rank = rank % l.tp;  // a TP group is consecutive ranks
  l.dp_rank = rank / l.tp;
  return l;
}

StatusOr<std::unique_ptr<ParallelGroups>> ParallelGroups::Create(
    Communicator* world, const Layout& layout, const DeviceGroupFactory& device_group) {
  std::unique_ptr<ParallelGroups> g(new ParallelGroups(world, layout));
  if (layout.tp > 1) {
    FB_ASSIGN_OR_RETURN(g->tp_owned_, world->Split(layout.dp_rank, layout.tp_rank));
    FB_ASSIGN_OR_RETURN(g->dp_owned_, world->Split(layout.tp_rank, layout.dp_rank));
    g->tp_ = g->tp_owned_.get();
    g->dp_ = g->dp_owned_.get();
  }
  g->tp_device_ = g->tp_;
  g->dp_device_ = g->dp_;
  if (!device_group || world->size() == 1) return g;
  if (layout.tp > 1) {
    FB_ASSIGN_OR_RETURN(g->tp_device_owned_, device_group(*g->tp_));
    g->tp_device_ = g->tp_device_owned_.get();
  }
  if (layout.dp > 1) {
    FB_ASSIGN_OR_RETURN(g->dp_device_owned_, device_group(*g->dp_));
    g->dp_device_ = g->dp_device_owned_.get();
  }
  return g;
}

Communicator::Traffic ParallelGroups::traffic() const {
  Communicator::Traffic sum = world_->traffic();
  for (const Communicator* c :
       {tp_owned_.get(), dp_owned_.get(), tp_device_owned_.get(), dp_device_owned_.get()}) {
    if (c != nullptr) sum += c->traffic();
  }
  return sum;
}

}  // namespace fullband::comm
