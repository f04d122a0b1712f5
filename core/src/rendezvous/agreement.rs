//! What the last arriver decides before any device call: whether the ranks agree on the
//! collective and on their tensors' shapes, and the plan they run. Pure: no lock, no device code
//! except dropping inputs of a generation that will not run (contained).
//!
//! ## Precedence
//!
//! A generation has one outcome however many things are wrong with it; the first of these wins:
//!
//! 1. the ranks asked for different collectives: [`ReductionMismatch`] when only the reduce
//!    operation differs, [`CollectiveMismatch`] otherwise;
//! 2. a rank's `prepare` or `describe` failed: the lowest such rank's error;
//! 3. the inputs differ in length or element type: [`ShapeMismatch`];
//! 4. the agreed collective cannot run on these inputs: [`InvalidCollective`].
//!
//! [`ReductionMismatch`]: NativeCollectiveError::ReductionMismatch
//! [`CollectiveMismatch`]: NativeCollectiveError::CollectiveMismatch
//! [`ShapeMismatch`]: NativeCollectiveError::ShapeMismatch
//! [`InvalidCollective`]: NativeCollectiveError::InvalidCollective

use super::state::Submission;
use crate::contain::discard;
use crate::error::NativeCollectiveError;
use crate::{Algorithm, Collective, LinkModel, Plan, ReduceOperation, TensorInfo};

/// What one rank asked for.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct Request {
    /// The collective.
    pub(crate) collective: Collective,
    /// The algorithm asked for (`Custom` exactly when `plan` is given).
    pub(crate) algorithm: Algorithm,
    /// A user's own plan, verified when it was built (boxed: submissions move through the
    /// rendezvous by value, and most carry none).
    pub(crate) plan: Option<Box<Plan>>,
}

impl Request {
    /// A built-in collective, `algorithm` resolved by the last arriver.
    pub(crate) fn built_in(collective: Collective, algorithm: Algorithm) -> Self {
        Self {
            collective,
            algorithm,
            plan: None,
        }
    }

    /// A user's own plan.
    pub(crate) fn custom(plan: Plan) -> Self {
        Self {
            collective: plan.collective(),
            algorithm: Algorithm::Custom,
            plan: Some(Box::new(plan)),
        }
    }
}

/// What a built-in plan was resolved from.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct PlanKey {
    collective: Collective,
    algorithm: Algorithm,
    input: TensorInfo,
}

/// The last resolved built-in plan, kept by the communicator so that a repeated request builds
/// and prices nothing. The runner of a generation takes it out and puts it back — the box, not
/// the plan: the runner changes threads from one generation to the next, and a plan moved by
/// value is written anew each time, so the next runner's core would fetch every line of it
/// again; boxed, the plan is only read once kept, and its lines stay in both cores' caches.
#[derive(Debug)]
pub(crate) struct CachedPlan {
    key: PlanKey,
    plan: Plan,
}

/// The plan a generation runs.
pub(crate) enum Resolved {
    /// The kept plan matched the request: it goes back into the cache as it is.
    Kept(Box<CachedPlan>),
    /// A plan built (or handed in) now, with the key to keep it under (`None` for a custom
    /// plan, which is never kept).
    Built(Plan, Option<PlanKey>),
}

impl Resolved {
    /// The plan to run.
    pub(crate) fn plan(&self) -> &Plan {
        match self {
            Resolved::Kept(kept) => &kept.plan,
            Resolved::Built(plan, _) => plan,
        }
    }

    /// What to keep for the next generation once the plan ran: a built-in plan (`None` for a
    /// custom one).
    pub(crate) fn into_kept(self) -> Option<Box<CachedPlan>> {
        match self {
            Resolved::Kept(kept) => Some(kept),
            Resolved::Built(plan, key) => key.map(|key| Box::new(CachedPlan { key, plan })),
        }
    }
}

/// A generation the ranks agreed on: its inputs in rank order and its plan.
pub(crate) struct Agreed<P> {
    /// The prepared inputs, in rank order.
    pub(crate) inputs: Vec<P>,
    /// The plan to run.
    pub(crate) plan: Resolved,
}

/// Decide generation `generation` from every rank's submission (one per rank, in rank order):
/// the inputs and plan to run, or the generation's one error (see the module's precedence).
/// `cache` holds the last built-in plan resolved on this communicator; a matching one is taken
/// out of it (the caller puts it back with [`Resolved::into_kept`]). Allocates nothing but the
/// inputs' vector when the ranks agree (an error's lists are built only on the error's path).
pub(crate) fn agree<P>(
    generation: u64,
    mut submissions: Vec<Submission<P>>,
    model: &LinkModel,
    cache: &mut Option<Box<CachedPlan>>,
) -> Result<Agreed<P>, NativeCollectiveError> {
    let world = submissions.len();
    let decided = requests_agree(generation, &submissions)
        .and_then(|()| first_failure(&submissions))
        .and_then(|()| shapes_agree(generation, &submissions))
        .and_then(|input| match submissions.first_mut() {
            Some(first) => plan_for(&mut first.request, world, input, model, cache),
            // A world has at least one rank, and rule 3 found a shape.
            None => Err(NativeCollectiveError::ShapeMismatch {
                generation,
                shapes: Vec::new(),
            }),
        });
    match decided {
        Ok(plan) => {
            // A vector of its own rather than collected in the submissions' allocation: the
            // elements differ in size, so collecting in place would reallocate it.
            let mut inputs = Vec::with_capacity(world);
            inputs.extend(
                submissions
                    .into_iter()
                    .filter_map(|submission| submission.prepared.ok().map(|(input, _)| input)),
            );
            Ok(Agreed { inputs, plan })
        }
        Err(error) => {
            discard(submissions);
            Err(error)
        }
    }
}

/// Rule 1: every rank asked for the same collective, algorithm and (custom) plan.
fn requests_agree<P>(
    generation: u64,
    submissions: &[Submission<P>],
) -> Result<(), NativeCollectiveError> {
    let Some(first) = submissions.first().map(|submission| &submission.request) else {
        return Ok(());
    };
    let requests = || submissions.iter().map(|submission| &submission.request);
    if requests().all(|request| request == first) {
        return Ok(());
    }
    // The same request but for the operation: a reduction mismatch (a different root is not).
    let same_kind = |request: &Request| {
        request.collective.with_operation(ReduceOperation::Sum)
            == first.collective.with_operation(ReduceOperation::Sum)
            && request.algorithm == first.algorithm
    };
    let reducing = first.collective.operation().is_some();
    if reducing && requests().all(same_kind) && first.algorithm != Algorithm::Custom {
        return Err(NativeCollectiveError::ReductionMismatch {
            generation,
            operations: requests()
                .filter_map(|request| request.collective.operation())
                .collect(),
        });
    }
    let listed: Vec<(Collective, Algorithm)> = requests()
        .map(|request| (request.collective, request.algorithm))
        .collect();
    let plans_differ = listed.iter().all(|entry| *entry == listed[0]);
    Err(NativeCollectiveError::CollectiveMismatch {
        generation,
        requests: listed,
        plans_differ,
    })
}

/// Rule 2: the lowest rank's `prepare` or `describe` failure, if any.
fn first_failure<P>(submissions: &[Submission<P>]) -> Result<(), NativeCollectiveError> {
    match submissions
        .iter()
        .find_map(|submission| submission.prepared.as_ref().err())
    {
        Some(error) => Err(error.clone()),
        None => Ok(()),
    }
}

/// Rule 3: one length and one element type; returns it. Runs after rule 2, so every rank's
/// shape is known.
fn shapes_agree<P>(
    generation: u64,
    submissions: &[Submission<P>],
) -> Result<TensorInfo, NativeCollectiveError> {
    let mut shapes = submissions
        .iter()
        .filter_map(|submission| submission.prepared.as_ref().ok().map(|(_, shape)| *shape));
    let first = shapes.next();
    match first {
        Some(first) if shapes.all(|shape| shape == first) => Ok(first),
        _ => Err(NativeCollectiveError::ShapeMismatch {
            generation,
            shapes: submissions
                .iter()
                .filter_map(|submission| submission.prepared.as_ref().ok().map(|(_, shape)| *shape))
                .collect(),
        }),
    }
}

/// Rule 4: the plan of the agreed request for `world` ranks of `input`, and the key to cache a
/// built-in one under.
fn plan_for(
    request: &mut Request,
    world: usize,
    input: TensorInfo,
    model: &LinkModel,
    cache: &mut Option<Box<CachedPlan>>,
) -> Result<Resolved, NativeCollectiveError> {
    if let Some(plan) = request.plan.take() {
        if plan.world() != world || plan.input_len() != input.len {
            return Err(NativeCollectiveError::InvalidCollective {
                collective: request.collective,
                algorithm: Algorithm::Custom,
                world,
                input_len: input.len,
                reason: format!(
                    "the custom plan is for {} ranks with {} elements each",
                    plan.world(),
                    plan.input_len()
                ),
            });
        }
        return Ok(Resolved::Built(*plan, None));
    }
    let key = PlanKey {
        collective: request.collective,
        algorithm: request.algorithm,
        input,
    };
    if let Some(cached) = cache.take_if(|cached| cached.key == key) {
        return Ok(Resolved::Kept(cached));
    }
    let plan = Plan::with_model(request.collective, request.algorithm, world, input, model)?;
    Ok(Resolved::Built(plan, Some(key)))
}

#[cfg(test)]
mod tests {
    //! The plan the last arriver keeps from one generation to the next.

    use super::{Request, Resolved, Submission, agree};
    use crate::{Algorithm, Collective, ElementType, LinkModel, Plan, ReduceOperation, TensorInfo};

    const INPUT: TensorInfo = TensorInfo {
        len: 12,
        element: ElementType::F32,
    };

    /// Every rank of `world` asking for `request` with an input of shape `INPUT`.
    fn asking(world: usize, request: &Request) -> Vec<Submission<()>> {
        (0..world)
            .map(|_| Submission {
                request: request.clone(),
                prepared: Ok(((), INPUT)),
            })
            .collect()
    }

    #[test]
    fn a_repeated_built_in_request_runs_the_plan_kept_from_the_generation_before() {
        let model = LinkModel::default();
        let request =
            Request::built_in(Collective::AllReduce(ReduceOperation::Sum), Algorithm::Ring);
        let mut cache = None;
        let first = agree(0, asking(3, &request), &model, &mut cache).unwrap();
        assert!(matches!(first.plan, Resolved::Built(_, Some(_))));
        let built = first.plan.plan().clone();
        cache = first.plan.into_kept();
        assert!(cache.is_some(), "a built-in plan is kept once it ran");

        let second = agree(1, asking(3, &request), &model, &mut cache).unwrap();
        assert!(
            matches!(second.plan, Resolved::Kept(_)),
            "the kept plan runs"
        );
        assert!(
            cache.is_none(),
            "the runner holds the kept plan while it runs"
        );
        assert_eq!(second.plan.plan(), &built);
        assert!(second.plan.into_kept().is_some(), "and puts it back");
    }

    #[test]
    fn a_custom_plan_is_never_kept() {
        let model = LinkModel::default();
        let plan = Plan::new(
            Collective::AllReduce(ReduceOperation::Sum),
            Algorithm::Direct,
            2,
            INPUT.len,
        )
        .unwrap();
        let mut cache = None;
        let agreed = agree(0, asking(2, &Request::custom(plan)), &model, &mut cache).unwrap();
        assert!(matches!(agreed.plan, Resolved::Built(_, None)));
        assert!(agreed.plan.into_kept().is_none());
    }
}
