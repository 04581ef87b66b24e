from tickwarden.cli import main

main()
