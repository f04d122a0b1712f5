//! Prints what an input decodes to: `cargo run --example decode_input -- <target> <file>`.
use ruccl_fuzz::bytes::Reader;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let (Some(target), Some(file)) = (args.get(1), args.get(2)) else {
        eprintln!("usage: decode_input <target> <file>");
        std::process::exit(2);
    };
    let bytes = std::fs::read(file).unwrap_or_else(|error| panic!("{file}: {error}"));
    let mut reader = Reader::new(&bytes);
    match target.as_str() {
        "plans" => println!("{:#?}", ruccl_fuzz::plans::PlanCase::decode(&mut reader)),
        "rendezvous_script" => println!(
            "{:#?}",
            ruccl_fuzz::rendezvous_script::Script::decode(&mut reader)
        ),
        "sim_contract" => println!(
            "{:#?}",
            ruccl_fuzz::sim_contract::ContractCase::decode(&mut reader)
        ),
        "registry_ops" => println!("{:#?}", ruccl_fuzz::registry_ops::decode(&mut reader)),
        "fault_spec_parse" => println!("{:?}", String::from_utf8_lossy(&bytes)),
        other => panic!("no target {other}"),
    }
}
