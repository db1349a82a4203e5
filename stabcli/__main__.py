from stabcli.cli.app import main

if __name__ == "__main__":  # multiprocessing's spawn (Dask's LocalCluster) re-imports this module
    main()
