@membership @cap-membership @mem-operators
Feature: Operators' CAs and files — the CA key types, certificates, revocation lists and file habits operators bring (SPEC §18, [C-21] 5, 10, 11, 13)

  An operator's fleet CA is often the SSH CA they already run, RSA or ECDSA; they keep files in
  Kubernetes ConfigMaps, delete and write them again, save them from Windows editors with a byte
  order mark, write revocation lists by hand with hex serials and comments, and paste a CA the
  way known_hosts or authorized_keys hold one. Every CA, certificate and KRL here is made by the
  real ssh-keygen of OpenSSH (CONTRACT §12); a CA's way of signing ("signing with …") is the
  extra arguments its ssh-keygen -s gets. Gateways heartbeat every second (the suite's setting),
  except where a host must be dropped within 2 seconds: there every 3 seconds (membership.feature).

  Background:
    Given a broker
    And a fleet CA "fleet" made by ssh-keygen

  # [C-21] 10: one trust file mixing every CA key type; host "a" is certified by the ed25519 CA,
  # host "b" by the row's, both in no peers file: each verifies the other's certificate.
  @MEM-2 @MEM-5 @ca-types
  Scenario Outline: a host certified by <kind> CA joins through a trust file mixing ed25519, ECDSA and RSA CAs, and briefs and replies flow
    Given a fleet CA "p256" made by ssh-keygen -t ecdsa
    And a fleet CA "p384" made by ssh-keygen -t ecdsa -b 384
    And a fleet CA "p521" made by ssh-keygen -t ecdsa -b 521
    And a fleet CA "rsa" made by ssh-keygen -t rsa
    And "rsa-sha256" is the CA "rsa" signing with "-t rsa-sha2-256"
    And every gateway trusts the CAs "p256", "rsa", "fleet", "p384" and "p521"
    And host "a" holds a certificate from "fleet" and is in no peers file
    And host "b" holds a certificate from "<ca>" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And ssh-keygen says the certificate of "b" is signed with <algorithm>
    And "w1" is idle
    Then within 2 heartbeats the rosters of "a" and "b" all list "lead" on "a" and "w1" on "b"
    When "lead" sends "a brief across CA key types" to "w1" and waits for the reply
    Then herdr on "b" records exactly 1 inject into "w1" with text "a brief across CA key types"
    When "w1" replies "a reply across CA key types"
    Then the send returns "injected" with reply "a reply across CA key types" within 10 seconds

    Examples:
      | kind                           | ca         | algorithm           |
      | an ECDSA nistp256              | p256       | ecdsa-sha2-nistp256 |
      | an ECDSA nistp384              | p384       | ecdsa-sha2-nistp384 |
      | an ECDSA nistp521              | p521       | ecdsa-sha2-nistp521 |
      | an RSA (rsa-sha2-512 signed)   | rsa        | rsa-sha2-512        |
      | an RSA (rsa-sha2-256 signed)   | rsa-sha256 | rsa-sha2-256        |

  # [C-21] 10: a SHA-1 ssh-rsa CA signature is refused (certificate); [C-21] 11: so is a host
  # certificate carrying critical options. As in membership.feature's hostile outline, a presence
  # from a host the receiver holds no key for is both unverifiable and badly certified.
  @MEM-2 @SIG-5 @ca-types @critical-options
  Scenario Outline: a host presenting <credential> is never let in
    Given a fleet CA "rsa" made by ssh-keygen -t rsa
    And "rsa-sha1" is the CA "rsa" signing with "-t ssh-rsa"
    And "fleet-forced" is the CA "fleet" signing with "-O force-command=/usr/bin/true -O source-address=10.0.0.0/8"
    And every gateway trusts the CAs "fleet" and "rsa"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" is idle
    And the probe watches the wire
    When the probe, as host "x", presents <credential> in its _gateway presence
    Then the gateway of "the roster" dead-letters it with x-death reason "rejected"
    And the gateway of "the roster" logs the rejection naming the check "certificate or signature"
    When the probe, as host "x", announces "x1"
    And the probe, as host "x", sends "w1" a brief from "x1"
    Then the gateway of "w1" dead-letters it with x-death reason "rejected"
    And the gateway of "w1" logs the rejection naming the check "certificate or signature"
    And over a window no roster lists anything of host "x"
    And nothing hostile was injected into "w1" or held for "lead"
    And every gateway is still ready

    Examples:
      | credential                                                        |
      | a certificate from "rsa-sha1", its RSA CA signature SHA-1 ssh-rsa |
      | a certificate from "fleet-forced" carrying critical options       |

  # [C-21] 11 and 12: a gateway's own certificate is checked as its peers would check it.
  @MEM-2 @MEM-4 @critical-options
  Scenario: a gateway started with a certificate carrying critical options logs an ERROR naming it and is never ready
    Given "fleet-forced" is the CA "fleet" signing with "-O force-command=/usr/bin/true -O source-address=10.0.0.0/8"
    And every gateway trusts the CA "fleet"
    And host "c" holds a certificate from "fleet-forced" and is in no peers file
    When host "c" starts its gateway, not waited for
    Then within 10 seconds of its start the gateway on "c" logs an ERROR naming its certificate file
    And the gateway on "c" answers /readyz 503, never 200, over 3 heartbeats, and is still running

  # [C-21] 10: a line of a type no gateway takes (ssh-dss, CONTRACT §12) is skipped, never the
  # whole file: the CA after it is applied.
  @MEM-1 @MEM-2 @dsa-line
  Scenario: a trust file applied mid-run with a line of a type no gateway takes applies the rest, and a WARN names that line
    Given a fleet CA "old-dsa" made by ssh-keygen -t dsa
    And a fleet CA "new" made by ssh-keygen -t ed25519
    And every gateway trusts the CA "fleet"
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    When the CAs "old-dsa" and "new" are added to every trust file
    Then within 2 seconds every roster lists "x1" of host "x", which the probe announces with a certificate from "new"
    And within 2 seconds the gateways on "a" and "b" log a WARN naming their trust file and line 3
    And over a window no gateway logs an ERROR naming its trust file

  @MEM-1 @MEM-2 @dsa-line
  Scenario: a gateway started with a trust-file line of a type no gateway takes starts, applies the rest, and a WARN names that line
    Given a fleet CA "old-dsa" made by ssh-keygen -t dsa
    And every gateway trusts the CAs "old-dsa" and "fleet"
    And host "c" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "c" runs a gateway with a worker "w3" whose parent is "lead"
    Then within 2 heartbeats the rosters of "a" and "c" all list "lead" on "a" and "w3" on "c"
    And the gateways on "a" and "c" logged a WARN naming their trust file and line 2
    And over a window no gateway logs an ERROR naming its trust file

  # MEM-1, CONTRACT §12: a CA pasted the way known_hosts or authorized_keys hold it is a line that
  # does not parse. The CAs the file listed come after it: a gateway that applied the lines before
  # the bad one would drop "b"; one that took the pasted CA would let "x" in.
  @MEM-1 @pasted-ca
  Scenario Outline: a trust file with a CA pasted in <form> form does not parse: an ERROR names it and its line, and the last good content holds
    Given a fleet CA "new" made by ssh-keygen -t ed25519
    And every gateway trusts the CA "fleet"
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    When "lead" sends briefs to "w1", which replies to each, in the background
    And every trust file is replaced by one whose line 2 is the CA "new" in <form> form, followed by the CAs it listed
    Then within 2 seconds the gateway on "a" logs an ERROR naming its trust file and line 2
    And within 2 seconds the gateway on "b" logs an ERROR naming its trust file and line 2
    When the probe, as host "x", presents a valid certificate from "new" in its _gateway presence
    And the probe, as host "x", announces "x1"
    Then over a window no roster lists anything of host "x"
    When the traffic has made 3 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated

    Examples:
      | form            |
      | known_hosts     |
      | authorized_keys |

  # [C-21] 13: the KRL as operators write it by hand. Serials start at 26 so that hex has letters
  # (0x1a); every line of the list ends in a comment.
  @MEM-4 @krl-by-hand
  Scenario Outline: a revocation list written by hand, revoking by <entry> with a comment ending the line, revokes within 2 seconds
    Given the gateways' heartbeat is 3 seconds
    And the CAs number certificates from serial 26
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And the probe watches the wire
    And the roster of "a" lists "w1" on "b"
    When the certificate of "b" is revoked in every revocation list by <entry>, with a comment ending the line
    Then within 2 seconds the roster of "a" lists nothing of host "b"
    When the probe publishes a REPLY from "w1" to "lead" signed with the key of "b"
    Then the gateway of "lead" dead-letters it with x-death reason "rejected"
    And the gateway of "lead" logs the rejection naming the check "revoked"

    Examples:
      | entry                        |
      | its serial in hex            |
      | a hex serial range around it |
      | its key id                   |

  # [C-21] 13: a binary KRL (ssh-keygen -k's output) is refused, never read: the one given here
  # revokes "b", so a gateway that took it would reject the traffic.
  @MEM-1 @MEM-4 @krl-binary
  Scenario: a binary KRL given mid-run is refused: an ERROR names the file, and the last good content holds
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    And "w1" finishes each brief quickly
    And the probe watches the wire
    And the probe announces "p1" on host "probe"
    When "lead" sends briefs to "w1", which replies to each, in the background
    And the revocation list of "a" is replaced by the binary KRL ssh-keygen -k makes of it with "b" revoked
    Then within 2 seconds the gateway on "a" logs an ERROR naming its revocation list
    When the traffic has made 5 more round trips and stops
    Then the traffic lost nothing, and nothing was rejected or duplicated
    And a valid message from "p1" to "lead" is still accepted

  @MEM-1 @krl-binary
  Scenario: a gateway started with a binary KRL refuses to start, naming the file
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When host "c" starts a gateway whose revocation list is a binary KRL revoking "b"
    Then the gateway on "c" exits non-zero within 10 seconds, its output naming its revocation list

  # [C-21] 5: a gateway watches the path, not the inode. "Within 2 seconds" counts from the
  # ConfigMap's ..data rename, from the end of the new write, or from the rename of the copy.
  @MEM-1 @MEM-2 @file-habits
  Scenario Outline: a trust file changed by <habit> is applied within 2 seconds
    Given a fleet CA "new" made by ssh-keygen -t ed25519
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "a" runs a gateway with a main "lead", its membership files <kept>
    And host "b" runs a gateway with a worker "w1" whose parent is "lead", its membership files <kept>
    And the probe watches the wire
    When the CA "new" is added to every trust file by <habit>
    Then within 2 seconds every roster lists "x1" of host "x", which the probe announces with a certificate from "new"

    Examples:
      | habit                                            | kept                               |
      | a ConfigMap update                               | in a Kubernetes ConfigMap mount    |
      | deleting it and writing it again                 | in plain files                     |
      | a rename of a copy that begins with a UTF-8 BOM  | in plain files                     |

  @MEM-1 @MEM-4 @file-habits
  Scenario Outline: a revocation list changed by <habit> revokes within 2 seconds
    Given the gateways' heartbeat is 3 seconds
    And every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And host "b" holds a certificate from "fleet" and is in no peers file
    And host "a" runs a gateway with a main "lead", its membership files <kept>
    And host "b" runs a gateway with a worker "w1" whose parent is "lead", its membership files <kept>
    And the roster of "a" lists "w1" on "b"
    When the certificate of "b" is revoked by its serial in every revocation list by <habit>
    Then within 2 seconds the roster of "a" lists nothing of host "b"

    Examples:
      | habit                                            | kept                               |
      | a ConfigMap update                               | in a Kubernetes ConfigMap mount    |
      | deleting it and writing it again                 | in plain files                     |
      | a rename of a copy that begins with a UTF-8 BOM  | in plain files                     |

  # CONTRACT §12: a UTF-8 BOM before a file's first line is not part of it. Each file's first line
  # matters here: [peers] (host "a" is known only through it), the CA "c"'s own certificate needs
  # ([C-21] 12: else never ready), and a revocation of "b" that only the list of "c" holds.
  @MEM-1 @MEM-2 @MEM-4 @bom
  Scenario: a gateway whose peers file, trust file and revocation list begin with a UTF-8 BOM starts and applies them
    Given every gateway trusts the CA "fleet"
    And every gateway reads a revocation list
    And hosts "b" and "c" hold certificates from "fleet" and are in no peers file
    And host "a" runs a gateway with a main "lead"
    And host "b" runs a gateway with a worker "w1" whose parent is "lead"
    When host "c" starts a gateway with a worker "w3" whose parent is "lead", its peers file, trust file and revocation list each beginning with a UTF-8 BOM, its revocation list revoking the certificate of "b"
    Then within 2 heartbeats the rosters of "a" and "c" all list "lead" on "a" and "w3" on "c"
    And over 2 heartbeats the roster of "c" lists nothing of host "b", while the roster of "a" lists "w1" on "b"
