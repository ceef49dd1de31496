// The parameter table: every parameter is found by its role and layer as well as by its name,
// the name is ParamName's, tensors a config leaves out are not found, and under tensor
// parallelism a rank's share keeps the whole tensor's role.
#include "model/param_table.h"

#include <gtest/gtest.h>

#include "tests/common/test_configs.h"

namespace fullband::model {
namespace {

TEST(ParameterTable, EverySpec_IsFoundByItsRoleAndByItsName) {
  ModelConfig m = TinyTestModel();
  m.qk_norm = true;
  const ParameterTable table = ParameterTable::Build(m);
  ASSERT_FALSE(table.specs().empty());
  for (const ParamSpec& spec : table.specs()) {
    EXPECT_EQ(spec.name, ParamName(spec.role, spec.layer));
    EXPECT_EQ(table.Find(spec.role, spec.layer), &spec) << spec.name;
    EXPECT_EQ(table.Find(spec.name), &spec) << spec.name;
  }
  EXPECT_EQ(table.Get(ParamRole::kWq, 1).name, "layers.1.attn.wq.weight");
  EXPECT_EQ(table.Get(ParamRole::kFeedbackWu).name, "feedback.w_u.weight");
}

TEST(ParameterTable, TensorsTheConfigLeavesOut_AreNotFound) {
  ModelConfig m = TinyTestModel();
  m.qk_norm = false;
  m.attn_gate = false;
  const ParameterTable table = ParameterTable::Build(m);
  EXPECT_EQ(table.Find(ParamRole::kQNorm, 0), nullptr);
  EXPECT_EQ(table.Find(ParamRole::kWgate, 0), nullptr);
  EXPECT_EQ(table.Find(ParamRole::kWq, m.n_layers), nullptr);  // past the last layer
  EXPECT_EQ(table.Find(ParamRole::kWq), nullptr);              // a per-layer role, no layer
  EXPECT_EQ(table.Find(ParamRole::kEmbed, 0), nullptr);        // a global role with one
}

TEST(ParameterTable, TensorParallelShare_KeepsTheRolesOfTheWholeTable) {
  const ModelConfig m = TinyTestModel();
  const ParameterTable whole = ParameterTable::Build(m);
  const ParameterTable share = ParameterTable::Build(m, /*tp=*/2, /*tp_rank=*/1);
  ASSERT_EQ(whole.specs().size(), share.specs().size());
  const ParamSpec& wo = share.Get(ParamRole::kWo, 0);
  EXPECT_EQ(wo.global_shape, whole.Get(ParamRole::kWo, 0).shape);
  EXPECT_EQ(wo.shape[1] * 2, wo.global_shape[1]);  // a row-parallel matrix: half the columns
}

}  // namespace
}  // namespace fullband::model
