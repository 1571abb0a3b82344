fn main() {
    std::process::exit(nodeagent::cli::main());
}
