//! The text form of fault specs and plans: the documented examples parse, the canonical form
//! round-trips, and every bad spec gets an error naming the bad part.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests assert by unwrapping

use proptest::prelude::*;
use ruccl_core::{Algorithm, Collective, Plan, ReduceOperation};
use ruccl_sim::fault::{
    DropTarget, FaultAction, FaultPlan, FaultSite, FaultSpec, ParseFaultError, RandomPlan,
};

fn parse(text: &str) -> Result<FaultSpec, ParseFaultError> {
    text.parse()
}

#[test]
fn the_documented_examples_parse() {
    assert_eq!(
        parse("exchange:step=2:rank=1:gen=3:panic"),
        Ok(FaultSpec::new(FaultSite::Exchange {
            step: Some(2),
            action: FaultAction::Panic
        })
        .on_rank(1)
        .in_generation(3))
    );
    assert_eq!(
        parse("prepare:rank=0:gen=1:error"),
        Ok(FaultSpec::new(FaultSite::Prepare(FaultAction::Error))
            .on_rank(0)
            .in_generation(1))
    );
    assert_eq!(
        parse("finish:gen=2:panic"),
        Ok(FaultSpec::new(FaultSite::Finish(FaultAction::Panic)).in_generation(2))
    );
    assert_eq!(
        parse("outputs:count=1:gen=0"),
        Ok(FaultSpec::new(FaultSite::Outputs { count: 1 }).in_generation(0))
    );
    assert_eq!(
        parse("drop:what=work:gen=4"),
        Ok(FaultSpec::new(FaultSite::Drop(DropTarget::Work)).in_generation(4))
    );
    // `describe` cannot fail: its fault is a panic, said or not, and never an error.
    let describe = FaultSpec::new(FaultSite::Describe)
        .on_rank(1)
        .in_generation(0);
    assert_eq!(parse("describe:rank=1:gen=0:panic"), Ok(describe));
    assert_eq!(parse("describe:rank=1:gen=0"), Ok(describe));
    assert_eq!(describe.to_string(), "describe:rank=1:gen=0:panic");
    assert!(parse("describe:error").is_err());
}

#[test]
fn fields_come_in_any_order_and_absent_ones_match_everything() {
    assert_eq!(
        parse(" panic:gen=3:exchange "),
        Err(ParseFaultError::UnknownSite("panic".to_owned()))
    );
    assert_eq!(
        parse("exchange:panic:gen=3:rank=1"),
        parse("exchange:rank=1:gen=3:panic")
    );
    assert_eq!(
        parse("begin:error"),
        Ok(FaultSpec::new(FaultSite::Begin(FaultAction::Error)))
    );
    assert_eq!(
        parse("drop:what=output:panic"),
        Ok(FaultSpec::new(FaultSite::Drop(DropTarget::Output)))
    );
}

#[test]
fn bad_specs_name_the_bad_part() {
    let cases: [(&str, ParseFaultError, &str); 13] = [
        ("", ParseFaultError::Empty, "empty"),
        (
            "exchnage:panic",
            ParseFaultError::UnknownSite("exchnage".into()),
            "`exchnage`",
        ),
        (
            "begin:explode",
            ParseFaultError::UnknownField("explode".into()),
            "`explode`",
        ),
        (
            "begin:colour=red:error",
            ParseFaultError::UnknownField("colour=red".into()),
            "`colour=red`",
        ),
        (
            "exchange:step=two:panic",
            ParseFaultError::BadNumber {
                key: "step",
                value: "two".into(),
            },
            "`step=two`",
        ),
        (
            "prepare:rank=-1:error",
            ParseFaultError::BadNumber {
                key: "rank",
                value: "-1".into(),
            },
            "`rank=-1`",
        ),
        (
            "drop:what=tensor",
            ParseFaultError::BadTarget("tensor".into()),
            "`what=tensor`",
        ),
        (
            "finish:gen=1:gen=2:panic",
            ParseFaultError::Duplicate("gen"),
            "`gen`",
        ),
        (
            "finish:error:panic",
            ParseFaultError::Duplicate("action"),
            "`action`",
        ),
        (
            "begin:step=1:error",
            ParseFaultError::NotAllowed {
                site: "begin",
                field: "step=1".into(),
            },
            "`step=1`",
        ),
        (
            "outputs:count=1:panic",
            ParseFaultError::NotAllowed {
                site: "outputs",
                field: "panic".into(),
            },
            "`panic`",
        ),
        (
            "drop:what=work:rank=1",
            ParseFaultError::NotAllowed {
                site: "drop:what=work",
                field: "rank=1".into(),
            },
            "`rank=1`",
        ),
        (
            "exchange:step=1",
            ParseFaultError::Missing {
                site: "exchange",
                field: "an action, `error` or `panic`",
            },
            "`exchange` needs an action",
        ),
    ];
    for (text, error, named) in cases {
        let parsed = parse(text);
        assert_eq!(parsed, Err(error), "`{text}`");
        let message = parsed.unwrap_err().to_string();
        assert!(
            message.contains(named),
            "`{text}`: `{message}` does not name `{named}`"
        );
        assert!(!message.contains('\n'), "one line: `{message}`");
    }
    assert_eq!(
        parse("outputs:gen=1"),
        Err(ParseFaultError::Missing {
            site: "outputs",
            field: "`count=N`"
        })
    );
    assert_eq!(
        parse("drop:gen=1"),
        Err(ParseFaultError::Missing {
            site: "drop",
            field: "`what=prepared|work|output`"
        })
    );
    assert_eq!(
        parse("drop:what=work:error"),
        Err(ParseFaultError::NotAllowed {
            site: "drop",
            field: "error".into()
        })
    );
}

#[test]
fn a_plan_names_the_spec_that_did_not_parse() {
    let error = "begin:gen=1:error, finish:gen=x:panic"
        .parse::<FaultPlan>()
        .unwrap_err();
    assert_eq!(error.index, 1);
    assert_eq!(error.spec, "finish:gen=x:panic");
    assert_eq!(
        error.to_string(),
        "fault 1 `finish:gen=x:panic`: `gen=x`: expected a non-negative integer"
    );
    assert_eq!("  ".parse::<FaultPlan>(), Ok(FaultPlan::none()));
}

#[test]
fn random_plans_are_reproducible_from_their_seed() {
    let shape = RandomPlan {
        seed: 42,
        world: 4,
        steps: 6,
        generations: 20,
        faults: 16,
    };
    assert_eq!(FaultPlan::random(shape), FaultPlan::random(shape));
    assert_ne!(
        FaultPlan::random(shape),
        FaultPlan::random(RandomPlan { seed: 43, ..shape })
    );
    let plan = FaultPlan::random(shape);
    assert_eq!(plan.specs().len(), 16);
    for spec in plan.specs() {
        assert!(spec.generation.is_some_and(|generation| generation < 20));
        assert!(spec.rank.is_none_or(|rank| rank < 4));
        match spec.site {
            FaultSite::Exchange { step, .. } => assert!(step.is_some_and(|step| step < 6)),
            FaultSite::Outputs { count } => assert_ne!(count, 4),
            _ => {}
        }
        // What a random plan draws can be written down and read back.
        assert_eq!(spec.to_string().parse::<FaultSpec>(), Ok(*spec));
    }
}

#[test]
fn random_plans_draw_exchange_steps_from_the_plans_own_steps() {
    let sum = Collective::AllReduce(ReduceOperation::Sum);
    for (algorithm, steps) in [(Algorithm::Direct, 1), (Algorithm::HalvingDoubling, 4)] {
        let plan = Plan::new(sum, algorithm, 4, 64).unwrap();
        assert_eq!(plan.steps().len(), steps);
        let shape = RandomPlan::for_plan(7, &plan, 5, 200);
        assert_eq!((shape.world, shape.steps), (4, steps));
        let drawn: Vec<usize> = FaultPlan::random(shape)
            .specs()
            .iter()
            .filter_map(|spec| match spec.site {
                FaultSite::Exchange { step, .. } => step,
                _ => None,
            })
            .collect();
        assert!(!drawn.is_empty(), "{algorithm}: no exchange fault in 200");
        assert!(
            drawn.iter().all(|&step| step < steps),
            "{algorithm}: {drawn:?}"
        );
    }
    // A plan without steps (one rank) never gets an exchange fault.
    let alone = Plan::new(sum, Algorithm::Ring, 1, 64).unwrap();
    let plan = FaultPlan::random(RandomPlan::for_plan(7, &alone, 5, 200));
    assert!(
        plan.specs()
            .iter()
            .all(|spec| !matches!(spec.site, FaultSite::Exchange { .. }))
    );
}

fn action() -> impl Strategy<Value = FaultAction> {
    prop_oneof![Just(FaultAction::Error), Just(FaultAction::Panic)]
}

fn spec() -> impl Strategy<Value = FaultSpec> {
    let site = prop_oneof![
        action().prop_map(FaultSite::Prepare),
        action().prop_map(FaultSite::Begin),
        (proptest::option::of(0usize..64), action())
            .prop_map(|(step, action)| FaultSite::Exchange { step, action }),
        action().prop_map(FaultSite::Finish),
        (0usize..64).prop_map(|count| FaultSite::Outputs { count }),
        prop_oneof![
            Just(DropTarget::Prepared),
            Just(DropTarget::Work),
            Just(DropTarget::Output)
        ]
        .prop_map(FaultSite::Drop),
    ];
    (
        site,
        proptest::option::of(0usize..16),
        proptest::option::of(any::<u64>()),
    )
        .prop_map(|(site, rank, generation)| FaultSpec {
            site,
            rank: rank.filter(|_| site.takes_rank()),
            generation,
        })
}

#[test]
fn a_rank_on_a_site_that_takes_none_is_left_out_of_the_text() {
    for site in [
        FaultSite::Outputs { count: 3 },
        FaultSite::Drop(DropTarget::Work),
    ] {
        let spec = FaultSpec::new(site).on_rank(2).in_generation(5);
        let text = spec.to_string();
        assert!(!text.contains("rank"), "{text}");
        let parsed: FaultSpec = text.parse().unwrap();
        assert_eq!(parsed, FaultSpec::new(site).in_generation(5));
    }
}

proptest! {
    #[test]
    fn the_canonical_form_round_trips(specs in proptest::collection::vec(spec(), 0..6)) {
        let plan = FaultPlan::new(specs);
        let text = plan.to_string();
        prop_assert_eq!(text.parse::<FaultPlan>(), Ok(plan));
    }
}
