//! The container provider's unit tests (and, with docker, its round trips).

use super::*;
use rstest::rstest;

#[rstest]
#[case(&["start", "4f2a"], "docker start 4f2a")]
#[case(
    &["create", "--hostname", "fleet-rabbitmq", "--label", "fleet-e2e=1", "-p", "127.0.0.1:20001:5672", "-p",
      "127.0.0.1:20002:15672", "fleet-rabbitmq:3.10-debian"],
    "docker create … fleet-rabbitmq:3.10-debian"
)]
fn long_commands_are_named_by_subcommand_and_target(#[case] args: &[&str], #[case] shown: &str) {
    assert_eq!(render(args), shown);
}

#[test]
fn a_failed_command_says_what_ran_how_it_ended_and_why() {
    let failure = DockerFailure {
        command: "docker run x".into(),
        end: DockerEnd::Exit(Some(125)),
        stderr: "\ndocker: Error response from daemon: port is already allocated.\nSee 'docker run --help'.".into(),
    };
    assert_eq!(
        failure.to_string(),
        "docker run x: exit 125: docker: Error response from daemon: port is already allocated."
    );
    assert!(port_clash_text(&failure.stderr));
    let silent = DockerFailure {
        command: "docker logs x".into(),
        end: DockerEnd::TimedOut(Duration::from_secs(90)),
        stderr: String::new(),
    };
    assert_eq!(silent.to_string(), "docker logs x: no end after 90s; killed");
    let error = docker_err("starting a container of img")(failure);
    assert!(
        error
            .to_string()
            .starts_with("starting a container of img: docker run x: exit 125: "),
        "{error}"
    );
}

#[test]
fn host_ports_are_read_from_docker_inspect() {
    let published: serde_json::Value = serde_json::from_str(
        r#"{"5671/tcp": null,
            "5672/tcp": [{"HostIp": "::1", "HostPort": "30000"}, {"HostIp": "127.0.0.1", "HostPort": "20001"}],
            "15672/tcp": [{"HostIp": "", "HostPort": "20002"}]}"#,
    )
    .expect("json");
    assert_eq!(host_port(&published, AMQP_PORT), Some(20_001));
    assert_eq!(host_port(&published, HTTP_PORT), Some(20_002));
    assert_eq!(host_port(&published, AMQPS_PORT), None);
    assert_eq!(host_port(&published, 4369), None);
}

#[test]
fn files_go_in_as_a_ustar_archive_rooted_at_slash() {
    let files = [
        FileIn {
            path: TLS_CONF_IN_CONTAINER.into(),
            content: b"listeners.ssl.default = 0.0.0.0:5671\n".to_vec(),
        },
        FileIn {
            path: format!("{TLS_DIR_IN_CONTAINER}/server.key"),
            content: vec![b'k'; 513],
        },
    ];
    let archive = tar(&files).expect("archive");
    // Header + one data block, header + two data blocks, two end blocks.
    assert_eq!(archive.len(), 512 * (2 + 3 + 2));
    let header = &archive[..512];
    assert!(header.starts_with(b"etc/rabbitmq/conf.d/90-fleet-tls.conf\0"));
    assert_eq!(&header[100..108], b"0000644\0");
    assert_eq!(
        &header[124..136],
        format!("{:011o}\0", files[0].content.len()).as_bytes()
    );
    assert_eq!(header[156], b'0');
    assert_eq!(&header[257..263], b"ustar\0");
    let mut blank = header.to_vec();
    blank[148..156].copy_from_slice(b"        ");
    let sum: u64 = blank.iter().map(|&b| u64::from(b)).sum();
    assert_eq!(&header[148..156], format!("{sum:06o}\0 ").as_bytes());
    assert_eq!(&archive[512..512 + files[0].content.len()], files[0].content.as_slice());
    assert!(archive[1024..].starts_with(b"etc/rabbitmq/fleet-tls/server.key\0"));
    assert!(archive[archive.len() - 1024..].iter().all(|&b| b == 0));
    let long = FileIn {
        path: format!("/{}", "d/".repeat(60)),
        content: Vec::new(),
    };
    assert!(tar(&[long]).is_err());
}

#[test]
fn rabbitmq_gets_its_certificates_and_the_listener_config() {
    let dir = std::env::temp_dir().join(format!("fleet-container-test-{}", uuid::Uuid::new_v4().simple()));
    std::fs::create_dir_all(&dir).expect("dir");
    let files = crate::tls::TlsFiles {
        ca_cert: dir.join("ca.pem"),
        server_cert: dir.join("server.pem"),
        server_key: dir.join("server.key"),
        dir: dir.clone(),
    };
    for (f, text) in [
        (&files.ca_cert, "ca"),
        (&files.server_cert, "cert"),
        (&files.server_key, "key"),
    ] {
        std::fs::write(f, text).expect("write");
    }
    let (put, cmd) = tls_setup(BrokerKind::RabbitMq, &files).expect("setup");
    assert!(cmd.is_empty());
    let paths: Vec<&str> = put.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(
        paths,
        [
            TLS_CONF_IN_CONTAINER,
            "/etc/rabbitmq/fleet-tls/ca.pem",
            "/etc/rabbitmq/fleet-tls/server.pem",
            "/etc/rabbitmq/fleet-tls/server.key"
        ]
    );
    let conf = String::from_utf8_lossy(&put[0].content).into_owned();
    assert!(
        conf.contains("ssl_options.keyfile = /etc/rabbitmq/fleet-tls/server.key"),
        "{conf}"
    );
    assert_eq!(put[3].content, b"key");
    let (put, cmd) = tls_setup(BrokerKind::LavinMq, &files).expect("setup");
    assert_eq!(put.len(), 2);
    assert_eq!(cmd, lavinmq_tls_args(LAVINMQ_TLS_DIR_IN_CONTAINER));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn erl_args_are_blank_separated_terms_without_inner_blanks() {
    let args = rabbitmq_erl_args();
    let words: Vec<&str> = args.split_whitespace().collect();
    assert_eq!(words.len(), 12, "{args}");
    assert_eq!(&words[..3], ["-rabbit", "collect_statistics_interval", "500"]);
    assert_eq!(&words[3..6], ["-rabbit", "quorum_tick_interval", "1000"]);
    assert_eq!(words[8], RETENTION_POLICIES);
}

#[test]
fn the_missing_image_hint_says_what_to_do() {
    let hint = missing_image_hint(BrokerKind::RabbitMq);
    assert!(hint.contains("scripts/setup") && hint.contains(LOCAL_RABBITMQ_IMAGE) && hint.contains(RABBITMQ_IMAGE_VAR));
    assert!(missing_image_hint(BrokerKind::LavinMq).contains(LAVINMQ_IMAGE_VAR));
}

#[test]
fn lavinmq_is_told_where_its_tls_listener_and_files_are() {
    let args = lavinmq_tls_args("/etc/lavinmq/fleet-tls");
    assert_eq!(
        args,
        [
            "--amqps-port=5671",
            "--cert",
            "/etc/lavinmq/fleet-tls/server.pem",
            "--key",
            "/etc/lavinmq/fleet-tls/server.key"
        ]
    );
}
