from stabcli.cli import main

main()
