#include "datasets/known_files.h"

namespace asgd::datasets {

const std::vector<KnownDataset>& KnownDatasets() {
  // Digests of the files in the reference data set (see each dataset's README.md there):
  // download digests as published, content digests after gunzip.
  static const std::vector<KnownDataset> kTable = {
      {"mnist",
       {"https://ossci-datasets.s3.amazonaws.com/mnist/", "http://yann.lecun.com/exdb/mnist/"},
       {
           {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609", 9912422,
            "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"},
           {"train-labels-idx1-ubyte", "train-labels-idx1-ubyte.gz",
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c", 28881,
            "65a50cbbf4e906d70832878ad85ccda5333a97f0f4c3dd2ef09a8a9eef7101c5"},
           {"t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz",
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6", 1648877,
            "0fa7898d509279e482958e8ce81c8e77db3f2f8254e26661ceb7762c4d494ce7"},
           {"t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz",
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6", 4542,
            "ff7bcfd416de33731a308c3f266cc351222c34898ecbeaf847f06e48f7ec33f2"},
       }},
      {"fashion-mnist",
       {"http://fashion-mnist.s3-website.eu-central-1.amazonaws.com/"},
       {
           {"train-images-idx3-ubyte", "train-images-idx3-ubyte.gz",
            "3aede38d61863908ad78613f6a32ed271626dd12800ba2636569512369268a84", 26421880,
            "c59f468a2f672dc815687fe0f83887768d799fd8a3f3276145d20f83aa44d888"},
           {"train-labels-idx1-ubyte", "train-labels-idx1-ubyte.gz",
            "a04f17134ac03560a47e3764e11b92fc97de4d1bfaf8ba1a3aa29af54cc90845", 29515,
            "bad3541b69d912435c50bb6ba87bec294ff4f6a2e1246121d8633921760443d9"},
           {"t10k-images-idx3-ubyte", "t10k-images-idx3-ubyte.gz",
            "346e55b948d973a97e58d2351dde16a484bd415d4595297633bb08f03db6a073", 4422102,
            "5b4141f0afbad91edebe8549f8fcffe087ea10ca49f1dbef5c9a5cd8815ce37b"},
           {"t10k-labels-idx1-ubyte", "t10k-labels-idx1-ubyte.gz",
            "67da17c76eaffca5446c3361aaab5c3cd6d1c2608764d35dfb1850b086bf8dd5", 5148,
            "0402a96d92fd2663957122ceb108a494c5af83dab82d92729df917d7dec38c34"},
       }},
      {"a9a",
       {"https://www.csie.ntu.edu.tw/~cjlin/libsvmtools/datasets/binary/"},
       {
           {"a9a", "a9a", "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906",
            2329875, "f5d5ffd8d865ff41328e7ee043e4b020816914ff6843ff15b98905ddbedce906"},
           {"a9a.t", "a9a.t", "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9",
            1164628, "1f448a153f0320399a7e40836eb207655b0bde0f21fc941cc472193daa9f5de9"},
       }},
      // CIFAR-10, binary version (Krizhevsky 2009). The archive's MD5 is the one its
      // authors publish on the dataset's page, its SHA-256 the one TensorFlow Datasets
      // records; the extracted files' SHA-256 are those torchvision's Ruby port
      // (torchvision-ruby) checks. Each file is 10,000 records of 3073 bytes.
      {"cifar10",
       {"https://www.cs.toronto.edu/~kriz/"},
       {
           {"data_batch_1.bin", "cifar-10-batches-bin/data_batch_1.bin",
            "cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5", 30730000,
            "cee916563c9f80d84e3cc88e17fdc0941787f1244f00a67874d45b261883ada5"},
           {"data_batch_2.bin", "cifar-10-batches-bin/data_batch_2.bin",
            "a591ca11fa1708a91ee40f54b3da4784ccd871ecf2137de63f51ada8b3fa57ed", 30730000,
            "a591ca11fa1708a91ee40f54b3da4784ccd871ecf2137de63f51ada8b3fa57ed"},
           {"data_batch_3.bin", "cifar-10-batches-bin/data_batch_3.bin",
            "bbe8596564c0f86427f876058170b84dac6670ddf06d79402899d93ceea26f67", 30730000,
            "bbe8596564c0f86427f876058170b84dac6670ddf06d79402899d93ceea26f67"},
           {"data_batch_4.bin", "cifar-10-batches-bin/data_batch_4.bin",
            "014e562d6e23c72197cc727519169a60359f5eccd8945ad5a09d710285ff4e48", 30730000,
            "014e562d6e23c72197cc727519169a60359f5eccd8945ad5a09d710285ff4e48"},
           {"data_batch_5.bin", "cifar-10-batches-bin/data_batch_5.bin",
            "755304fc0b379caeae8c14f0dac912fbc7d6cd469eb67a1029a08a39453a9add", 30730000,
            "755304fc0b379caeae8c14f0dac912fbc7d6cd469eb67a1029a08a39453a9add"},
           {"test_batch.bin", "cifar-10-batches-bin/test_batch.bin",
            "8e2eb146ae340b09e24670f29cabc6326dba54da8789dab6768acf480273f65b", 30730000,
            "8e2eb146ae340b09e24670f29cabc6326dba54da8789dab6768acf480273f65b"},
       },
       KnownFile{"cifar-10-binary.tar.gz", "cifar-10-binary.tar.gz",
                 "c4a38c50a1bc5f3a1c5537f2155ab9d68f9f25eb1ed8d9ddda3db29a59bca1dd", 170052171, "",
                 "c32a1d4ab5d03f1284b67883e8d87530"}},
  };
  return kTable;
}

const KnownDataset* FindKnownDataset(std::string_view name) {
  for (const KnownDataset& d : KnownDatasets()) {
    if (d.name == name) return &d;
  }
  return nullptr;
}

const KnownFile* FindKnownFile(std::string_view dataset, std::string_view file_name) {
  const KnownDataset* d = FindKnownDataset(dataset);
  if (d == nullptr) return nullptr;
  for (const KnownFile& f : d->files) {
    if (f.name == file_name) return &f;
  }
  return nullptr;
}

}  // namespace asgd::datasets
