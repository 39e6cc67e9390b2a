@publish
Feature: Publishing — confirmed, mandatory, and unroutable fails fast (SPEC §4)

  Background:
    Given a broker
    And host "a" runs a gateway with a main "lead"

  @PUB-2 @PUB-1 @smoke
  Scenario: a send to a gid with no inbox fails fast with no_route
    When "lead" sends "hello?" to an unknown gid
    Then the send fails fast, well under the inject bound
