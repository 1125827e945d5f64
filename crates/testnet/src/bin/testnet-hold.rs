//! Creates a namespace, prints its name and waits to be interrupted: lets testnet's own tests check
//! that SIGINT removes what a process created.

fn main() {
    let ns = testnet::Netns::create("h").expect("create namespace");
    println!("{}", ns.name());
    std::thread::sleep(std::time::Duration::from_secs(60));
}
