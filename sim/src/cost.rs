//! The α–β link model, from the core ([`LinkModel`], [`Links`]): a step costs `α + b/β` for the
//! bytes `b` on its busiest link, a plan or a recorded generation the sum of its steps. A plan is
//! priced with [`LinkModel::plan_time`]; a generation the ledger recorded with
//! [`GenerationTraffic::priced`](crate::ledger::GenerationTraffic::priced). The simulated
//! device's own model is [`SimDevice::model`](crate::SimDevice::model).

pub use ruccl_core::{LinkModel, LinkModelError, Links};
