use clap::Parser;

fn main() -> std::process::ExitCode {
    replaysafe::telemetry::init();
    let cli = replaysafe::cli::Cli::parse();
    let runtime = tokio::runtime::Runtime::new().expect("starting the tokio runtime");
    match runtime.block_on(replaysafe::cli::run(cli)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("replaysafe: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
