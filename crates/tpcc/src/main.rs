//! `keel-tpcc`: the TPC-C-like workload's command line (see `keel-tpcc --help`).

fn main() {
    std::process::exit(keel_tpcc::cli::main());
}
